"""isa/ — one declarative ISA specification shared by the compiler and the simulators.

Imports nothing of ours. See isa/README.md for the spec file format and the expression language. Each name
below is imported from its module when first read (``isa.lazy``): ``isa.builtin_specs()`` loads the spec
loader, not the assembler and its numpy.
"""

from isa.lazy import lazy_names

_HOMES = {
    "asm": ("assemble", "disassemble", "format_insn"),
    "binary": ("decode_insn", "decode_program", "encode_insn", "encode_program"),
    "errors": ("AsmError", "EncodingError", "ExecError", "ISAError", "ISASpecError", "ParseError"),
    "instance": ("Violation", "check_constraints", "engine_of", "execute", "operand_shape", "reads_operands",
                 "timing_of"),
    "loader": ("builtin_specs", "load_isa", "load_spec_file", "load_spec_text"),
    "program": ("Program",),
    "spec": ("ISA", "Constraint", "DataKind", "Enum", "Field", "Format", "Insn", "Instruction", "Operand",
             "Space", "Timing"),
}
__all__ = sorted(name for names in _HOMES.values() for name in names)
__getattr__, __dir__ = lazy_names(__name__, {name: home for home, names in _HOMES.items() for name in names})
