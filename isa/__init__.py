"""isa/ — one declarative ISA specification shared by the compiler and the simulators.

Imports nothing of ours. See isa/README.md for the spec file format and the expression language.
"""

from isa.asm import assemble, disassemble, format_insn
from isa.binary import decode_insn, decode_program, encode_insn, encode_program
from isa.errors import AsmError, EncodingError, ExecError, ISAError, ISASpecError, ParseError
from isa.instance import Violation, check_constraints, execute, operand_shape, reads_operands, timing_of
from isa.loader import builtin_specs, load_isa, load_spec_file, load_spec_text
from isa.program import Program
from isa.spec import ISA, Constraint, DataKind, Enum, Field, Format, Insn, Instruction, Operand, Space, Timing

__all__ = [
    "ISA", "AsmError", "Constraint", "DataKind", "EncodingError", "Enum", "ExecError", "Field", "Format",
    "ISAError", "ISASpecError", "Insn", "Instruction", "Operand", "ParseError", "Program", "Space", "Timing",
    "Violation", "assemble", "builtin_specs", "check_constraints", "decode_insn", "decode_program",
    "disassemble", "encode_insn", "encode_program", "execute", "format_insn", "load_isa", "load_spec_file",
    "load_spec_text", "operand_shape", "reads_operands", "timing_of",
]
