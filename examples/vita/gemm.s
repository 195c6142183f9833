# Tandem program for ISA 'vita'
.isa vita
.param LOG_WGT_BUFF_SIZE = 15
.data uop
    dst_idx=0, src_idx=0, wgt_idx=0
    dst_idx=0, src_idx=0, wgt_idx=0
    dst_idx=0, src_idx=1, wgt_idx=1
    dst_idx=0, src_idx=2, wgt_idx=2
    dst_idx=0, src_idx=3, wgt_idx=3
.text
    LOAD_UOP sram_base=0x0, dram_base=0x0, y_size=1, x_size=5, x_stride=5, y_pad_0=0, y_pad_1=0, x_pad_0=0, x_pad_1=0
    LOAD_WGT sram_base=0x0, dram_base=0x84, y_size=1, x_size=8, x_stride=8, y_pad_0=0, y_pad_1=0, x_pad_0=0, x_pad_1=0
    GEMM_RESET uop_bgn=0, uop_end=1, iter_out=16, iter_in=2, dst_factor_out=2, dst_factor_in=1, src_factor_out=0, src_factor_in=0, wgt_factor_out=0, wgt_factor_in=0
    LOAD_INP push_next_dep=1, sram_base=0x0, dram_base=0x800, y_size=1, x_size=64, x_stride=64, y_pad_0=0, y_pad_1=0, x_pad_0=0, x_pad_1=0
    GEMM pop_prev_dep=1, uop_bgn=1, uop_end=5, iter_out=16, iter_in=2, dst_factor_out=2, dst_factor_in=1, src_factor_out=4, src_factor_in=0, wgt_factor_out=0, wgt_factor_in=4
    ALU_SHR uop_bgn=0, uop_end=1, iter_out=16, iter_in=2, dst_factor_out=2, dst_factor_in=1, src_factor_out=2, src_factor_in=1, use_imm=1, imm=8
    ALU_MAX uop_bgn=0, uop_end=1, iter_out=16, iter_in=2, dst_factor_out=2, dst_factor_in=1, src_factor_out=2, src_factor_in=1, use_imm=1, imm=-128
    ALU_MIN push_next_dep=1, uop_bgn=0, uop_end=1, iter_out=16, iter_in=2, dst_factor_out=2, dst_factor_in=1, src_factor_out=2, src_factor_in=1, use_imm=1, imm=127
    STORE_OUT pop_prev_dep=1, push_prev_dep=1, sram_base=0x0, dram_base=0x8c0, y_size=1, x_size=32, x_stride=32, y_pad_0=0, y_pad_1=0, x_pad_0=0, x_pad_1=0
    FINISH pop_next_dep=1
