# Tandem program for ISA 'diannao'
.isa diannao
.text
    li rd=r31, imm=0
    rdid rd=r3, which=CORE_ID
    rdid rd=r4, which=CLUSTER_ID
    rdid rd=r5, which=CORE_DIM
    mul rd=r4, rs1=r4, rs2=r5
    add rd=r3, rs1=r3, rs2=r4
    li rd=r4, imm=4096
    mul rd=r4, rs1=r3, rs2=r4
    add rd=r4, rs1=r4, rs2=r0
    memcpyr dst_space=NMEM, src_space=GMEM, rd=r31, rs1=r4, dst_off=0, src_off=0, len=4096, count=1, dst_stride=4096, src_stride=4096
    li rd=r4, imm=4096
    mul rd=r4, rs1=r3, rs2=r4
    add rd=r4, rs1=r4, rs2=r1
    memcpyr dst_space=NMEM, src_space=GMEM, rd=r31, rs1=r4, dst_off=4096, src_off=0, len=4096, count=1, dst_stride=4096, src_stride=4096
    vadd.f32 dst=0x0, a=0x0, b=0x1000, n=1024
    li rd=r4, imm=4096
    mul rd=r4, rs1=r3, rs2=r4
    add rd=r4, rs1=r4, rs2=r2
    memcpyr dst_space=GMEM, src_space=NMEM, rd=r4, rs1=r31, dst_off=0, src_off=0, len=4096, count=1, dst_stride=4096, src_stride=4096
    halt
