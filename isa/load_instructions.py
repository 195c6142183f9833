"""Loading one instruction of a spec (its format, fixed fields, type variables, operands, indices,
semantics, constraints and timing), and checking that the encodable instructions decode apart."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from isa.dtypes import canonical
from isa.encoding import fixed_pattern
from isa.errors import ParseError
from isa.executor import MAX_INDEX_EXTENT
from isa.lang.parser import parse_statements
from isa.lang.tree import Expr
from isa.lang.typecheck import TensorSig, typecheck
from isa.load_values import SpecReader, type_name
from isa.spec import (
    CONSTRAINT_KINDS,
    OPERAND_KINDS,
    Constraint,
    Enum,
    Field,
    Format,
    Instruction,
    Operand,
    Space,
    Timing,
    type_bindings,
)

_INSN_KEYS = {"summary", "format", "fixed", "types", "operands", "indices", "semantics", "constraints",
              "timing", "intrinsic", "group", "doc", "intrinsic_args", "features", "threads",
              "intrinsic_accumulator"}
_OPERAND_KEYS = {"name", "kind", "space", "dtype", "shape", "strides", "addr", "cluster", "doc"}
_CONSTRAINT_KEYS = {"kind", "rule", "message"}
_TIMING_KEYS = {"unit", "latency", "cycles", "doc", "async", "engine"}


class InstructionLoader(SpecReader):
    """The loader of one instruction's table and of its parts."""

    def load_instruction(self, iname: str, body: object, formats: dict[str, Format], enums: dict[str, Enum],
                         spaces: dict[str, Space]) -> Instruction:
        body = self.keys(body, _INSN_KEYS, f"instruction '{iname}'")
        summary = self.need(body, "summary", str, f"instruction '{iname}'")
        fmt = None
        if "format" in body:
            fname = self.need(body, "format", str, "an instruction")
            if fname not in formats:
                raise self.error(f"unknown format '{fname}'; formats are {', '.join(formats) or 'none'}",
                                 "format")
            fmt = formats[fname]
        fixed = self.load_fixed(body.get("fixed", {}), fmt, enums)
        types = self.load_types(body.get("types", {}), fmt, enums)
        fields = {f.name: f for f in fmt.fields if f.name not in fixed} if fmt else {}
        scalars = {**self.const_names, **{n: "field" for n in fields}}
        for tv in types:
            if tv in self.const_names:
                raise self.error(f"type variable '{tv}' has the name of a parameter or enum value", "types")
        operands = self.load_operands(body.get("operands", []), scalars, types, fields, spaces)
        sigs_any = {op.name: TensorSig(types.get(op.dtype, ("i32",))[0] if op.dtype in types else op.dtype,
                                       op.shape) for op in operands}
        # addresses may read operand tensors (a register file): check them once the operands exist
        operands = tuple(self.check_addr(op, scalars, types, sigs_any) for op in operands)
        indices = self.load_indices(body.get("indices", {}), scalars, types, operands, fields)
        text = body.get("semantics", "")
        if not isinstance(text, str):
            raise self.error(f"'semantics' must be a string, but got {type_name(text)}", "semantics")
        statements, typed = self.load_semantics(text, operands, indices, scalars, types)
        constraints = self.load_constraints(body.get("constraints", []), scalars, types, operands)
        timing = self.load_timing(body.get("timing", {}), scalars, types, operands)
        for key in ("intrinsic", "group", "doc"):
            if key in body and not isinstance(body[key], str):
                raise self.error(f"'{key}' must be a string, but got {type_name(body[key])}", key)
        args = self.load_intrinsic_args(body.get("intrinsic_args", []), operands, "intrinsic" in body)
        features = self.load_features(body.get("features", []))
        threads = body.get("threads", 1)
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise self.error(f"'threads' must be a positive integer (the threads that execute one instance "
                             f"together), but got {threads!r}", "threads")
        accumulator = self.load_intrinsic_accumulator(body.get("intrinsic_accumulator"), operands, args,
                                                      typed)
        return Instruction(iname, summary, fmt, MappingProxyType(fixed), MappingProxyType(types), operands,
                           text, statements, MappingProxyType(typed), constraints, timing,
                           body.get("intrinsic"), body.get("group"), body.get("doc", ""), args, features,
                           threads, accumulator)

    def load_intrinsic_args(self, raw: object, operands, has_intrinsic: bool) -> tuple[str, ...]:
        """The operands an intrinsic takes, in its order: a list of operand names."""
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise self.error(f"'intrinsic_args' must be a list of operand names, but got {raw!r}",
                             "intrinsic_args")
        names = {op.name for op in operands}
        for name in raw:
            if name not in names:
                raise self.error(f"'intrinsic_args' names '{name}', which is not an operand (operands: "
                                 f"{', '.join(sorted(names))})", "intrinsic_args")
        if raw and not has_intrinsic:
            raise self.error("'intrinsic_args' needs an 'intrinsic'", "intrinsic_args")
        return tuple(raw)

    def load_intrinsic_accumulator(self, raw: object, operands, args: tuple[str, ...], typed) -> str | None:
        """The operand an intrinsic without an accumulator argument has its result added to: an operand the
        semantics reads, not one of ``intrinsic_args``, with the dtype and shape of the one it writes."""
        if raw is None:
            return None
        key = "intrinsic_accumulator"
        if not isinstance(raw, str):
            raise self.error(f"'{key}' must be an operand name, but got {raw!r}", key)
        if not args:
            raise self.error(f"'{key}' needs 'intrinsic_args' (the operands the intrinsic takes)", key)
        if raw in args:
            raise self.error(f"'{key}' names '{raw}', which the intrinsic takes already (intrinsic_args "
                             f"{list(args)}); it is for an intrinsic that takes no accumulator", key)
        ops = {op.name: op for op in operands}
        if raw not in ops:
            raise self.error(f"'{key}' names '{raw}', which is not an operand (operands: "
                             f"{', '.join(sorted(ops))})", key)
        for sem in typed.values():
            if raw not in sem.reads or len(sem.writes) != 1:
                raise self.error(f"the semantics must read '{raw}' and write one operand (it reads "
                                 f"{list(sem.reads)}, writes {list(sem.writes)})", key)
            out = ops[sem.writes[0]]
            if (out.dtype, out.shape) != (ops[raw].dtype, ops[raw].shape):
                raise self.error(f"'{raw}' ({ops[raw].dtype}, shape {_shape(ops[raw])}) must have the dtype "
                                 f"and shape of '{out.name}' ({out.dtype}, shape {_shape(out)}), the result "
                                 f"it is added to", key)
        return raw

    def load_features(self, raw: object) -> tuple[tuple[str, ...], ...]:
        """CPU features: a list of names (all needed), or a list of such lists (any one set suffices)."""
        if isinstance(raw, list) and all(isinstance(x, str) for x in raw):
            return (tuple(raw),) if raw else ()
        if isinstance(raw, list) and all(isinstance(x, list) and x and all(isinstance(y, str) for y in x)
                                         for x in raw):
            return tuple(tuple(x) for x in raw)
        raise self.error(f"'features' must be a list of feature names or a list of such lists, but got "
                         f"{raw!r}", "features")

    def load_fixed(self, raw: object, fmt: Format | None, enums: dict[str, Enum]) -> dict[str, int]:
        if not isinstance(raw, dict):
            raise self.error(f"'fixed' must be a table of field = value, but got {type_name(raw)}", "fixed")
        if raw and fmt is None:
            raise self.error("'fixed' needs a 'format'", "fixed")
        fixed = {}
        for name, value in raw.items():
            try:
                f = fmt.field(name)
            except KeyError:
                raise self.error(f"format '{fmt.name}' has no field '{name}'", "fixed") from None
            if isinstance(value, str):
                code = enums[f.enum].values.get(value) if f.enum else None
                if code is None:
                    raise self.error(f"'{value}' is not a value of the enum of field '{name}'", "fixed")
                value = code
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.error(f"fixed value of '{name}' must be an integer or enum name, but got "
                                 f"{type_name(value)}", "fixed")
            if not f.lo <= value <= f.hi:
                raise self.error(f"fixed value {value} of '{name}' does not fit its {f.bits} bits "
                                 f"({f.lo}..{f.hi})", "fixed")
            fixed[name] = value
        return fixed

    def load_types(self, raw: object, fmt: Format | None,
                   enums: dict[str, Enum]) -> dict[str, tuple[str, ...]]:
        if not isinstance(raw, dict):
            raise self.error(f"'types' must be a table of T = [dtypes], but got {type_name(raw)}", "types")
        types = {}
        if raw and fmt is None:
            raise self.error("type variables need a 'format' with a field of kind 'type' that binds them",
                             "types")
        for tv, values in raw.items():
            self.name_ok(tv, "a type variable", "types")
            if canonical(tv):
                raise self.error(f"type variable '{tv}' has the name of a dtype", "types")
            if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
                raise self.error(f"type variable '{tv}' needs a non-empty list of dtype names", "types")
            names = []
            for v in values:
                c = canonical(v)
                if c is None:
                    raise self.error(f"unknown dtype '{v}' for type variable '{tv}'", "types")
                names.append(c)
            if fmt is not None:
                try:
                    f = fmt.field(tv)
                except KeyError:
                    raise self.error(f"type variable '{tv}' needs a field '{tv}' of kind 'type' in format "
                                     f"'{fmt.name}'", "types") from None
                if f.kind != "type":
                    raise self.error(f"field '{tv}' binds a type variable, so its kind must be 'type'",
                                     "types")
                members = {canonical(n) for n in enums[f.enum].values}
                missing = [n for n in names if n not in members]
                if missing:
                    raise self.error(f"dtype '{missing[0]}' of '{tv}' has no code in enum '{f.enum}'",
                                     "types")
            types[tv] = tuple(names)
        return types

    def load_operands(self, raw: object, scalars: dict[str, str], types: dict[str, tuple[str, ...]],
                      fields: dict[str, Field], spaces: dict[str, Space]) -> tuple[Operand, ...]:
        if not isinstance(raw, list):
            raise self.error(f"'operands' must be a list of tables, but got {type_name(raw)}", "operands")
        out = []
        seen = set()
        for item in raw:
            item = self.keys(item, _OPERAND_KEYS, "an operand", "operands")
            name = self.name_ok(self.need(item, "name", str, "an operand", "operands"), "an operand name",
                                "operands")
            where = f"operands.{name}"
            if name in seen:
                raise self.error(f"duplicate operand name '{name}'", where)
            if name in self.const_names or name in types:
                raise self.error(f"operand '{name}' has the name of a parameter, enum value or type variable",
                                 where)
            seen.add(name)
            kind = item.get("kind", "tensor")
            if kind not in OPERAND_KINDS:
                raise self.error(f"unknown operand kind {kind!r}; kinds are {', '.join(OPERAND_KINDS)}",
                                 f"{where}.kind")
            dt = self.need(item, "dtype", str, "an operand", f"{where}.dtype")
            if dt not in types:
                if canonical(dt) is None:
                    raise self.error(f"unknown dtype '{dt}'; dtypes are i8 i16 i32 i64 u8 u16 u32 u64 f16 "
                                     "bf16 f32 f64 bool, or a type variable of 'types'", f"{where}.dtype")
                dt = canonical(dt)
            space = item.get("space")
            space_is_field = False
            if space is not None and not isinstance(space, str):
                raise self.error(f"'space' must be the name of a memory space (or of a field whose enum is "
                                 f"'space'), but got {type_name(space)}", f"{where}.space")
            if space is not None:
                if space in fields and fields[space].enum == "space":
                    space_is_field = True
                elif space not in spaces:
                    raise self.error(f"unknown memory space '{space}'; spaces are "
                                     f"{', '.join(spaces) or 'none'}", f"{where}.space")
            elif kind == "tensor" and spaces:
                raise self.error("a tensor operand needs a 'space'", f"{where}.space")
            shape_raw = self.need(item, "shape", list, "an operand", f"{where}.shape")
            shape = tuple(self.expr(v, f"{where}.shape", scalars=scalars) for v in shape_raw)
            for k, dim in enumerate(shape):
                value = self.constant_value(dim)
                if value is not None and value < 1:
                    raise self.error(f"dimension {k} of the shape is {value}; dimensions must be at least 1",
                                     f"{where}.shape")
            strides = None
            if "strides" in item:
                sr = item["strides"]
                if not isinstance(sr, list) or len(sr) != len(shape):
                    raise self.error(f"'strides' must be a list of {len(shape)} expressions",
                                     f"{where}.strides")
                strides = tuple(self.expr(v, f"{where}.strides", scalars=scalars) for v in sr)
            addr = item.get("addr")
            cluster = item.get("cluster")
            if cluster is not None and (kind != "tensor" or space is None):
                raise self.error("'cluster' (the cluster whose copy of a per-cluster space the operand lies "
                                 "in) needs a tensor operand in a memory space", f"{where}.cluster")
            out.append(Operand(name, kind, dt, shape, space, space_is_field, strides, addr,
                               item.get("doc", ""), cluster))
        return tuple(out)

    def check_addr(self, op: Operand, scalars, types, sigs) -> Operand:
        """``op`` with its address and cluster parsed (they may read register operands)."""
        parsed = {key: self.expr(text, f"operands.{op.name}.{key}", scalars=scalars,
                                 types={t: v[0] for t, v in types.items()}, tensors=sigs)
                  for key, text in (("addr", op.addr), ("cluster", op.cluster)) if text is not None}
        return dataclasses.replace(op, **parsed) if parsed else op

    def load_indices(self, raw: object, scalars, types, operands,
                     fields) -> dict[str, tuple[str, Expr | None]]:
        if not isinstance(raw, dict):
            raise self.error(f"'indices' must be a table of name = kind, but got {type_name(raw)}", "indices")
        out = {}
        for name, spec in raw.items():
            self.name_ok(name, "an index name", "indices")
            if name in scalars or name in types:
                raise self.error(f"index '{name}' has the name of a field, parameter, enum value or type "
                                 "variable", f"indices.{name}")
            extent = None
            if isinstance(spec, dict):
                self.keys(spec, {"kind", "extent"}, f"index '{name}'", f"indices.{name}")
                kind = spec.get("kind")
                if "extent" in spec:
                    extent = self.expr(spec["extent"], f"indices.{name}.extent", scalars=scalars)
                    self.check_extent(name, extent)
            else:
                kind = spec
            if kind not in ("spatial", "reduce"):
                raise self.error(f"index '{name}' must be \"spatial\" or \"reduce\", but got {kind!r}",
                                 f"indices.{name}")
            out[name] = (kind, extent)
        return out

    def check_extent(self, name: str, extent: Expr) -> None:
        """An extent that depends on parameters only must be a count the executor can hold: 1 to
        ``MAX_INDEX_EXTENT`` (one that reads fields is checked when an instance runs)."""
        n = self.constant_value(extent)
        if n is None:
            return
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_INDEX_EXTENT:
            raise self.error(f"index '{name}' has extent {n!r}; an index counts 1 to {MAX_INDEX_EXTENT:,} "
                             f"elements (2**32)", f"indices.{name}.extent")

    def load_semantics(self, text: str, operands, indices, scalars, types):
        try:
            statements = parse_statements(text)
        except ParseError as e:
            raise self.parse_error(e, "semantics") from None
        typed = {}
        for binding in type_bindings(types):
            sigs = {op.name: TensorSig(binding.get(op.dtype, op.dtype), op.shape) for op in operands}
            try:
                sem = typecheck(text, statements, tensors=sigs, indices=indices, scalars=scalars,
                                types=binding)
            except ParseError as e:
                suffix = f" (with {', '.join(f'{k} = {v}' for k, v in binding.items())})" if binding else ""
                raise self.parse_error(e, "semantics", suffix) from None
            typed[tuple(sorted(binding.items()))] = sem
        return statements, typed

    def load_constraints(self, raw: object, scalars, types, operands) -> tuple[Constraint, ...]:
        if not isinstance(raw, list):
            raise self.error(f"'constraints' must be a list of tables, but got {type_name(raw)}",
                             "constraints")
        out = []
        sigs = {op.name: TensorSig(types[op.dtype][0] if op.dtype in types else op.dtype, op.shape)
                for op in operands}
        for k, item in enumerate(raw):
            field = f"constraints[{k}]"
            item = self.keys(item, _CONSTRAINT_KEYS, "a constraint", field)
            kind = item.get("kind", "other")
            if kind not in CONSTRAINT_KINDS:
                raise self.error(f"unknown constraint kind {kind!r}; kinds are {', '.join(CONSTRAINT_KINDS)}",
                                 f"{field}.kind")
            rule_text = self.need(item, "rule", str, "a constraint", f"{field}.rule")
            rule = self.expr(rule_text, f"{field}.rule", scalars=scalars,
                             types={t: v[0] for t, v in types.items()}, tensors=sigs)
            if getattr(rule, "dtype", "bool") != "bool":
                raise self.error(f"a rule must be a condition (a comparison or a logical combination), but "
                                 f"{rule_text!r} is {rule.dtype}", f"{field}.rule")
            message = item.get("message", rule_text)
            if not isinstance(message, str):
                raise self.error("'message' must be a string", f"{field}.message")
            out.append(Constraint(kind, rule, rule_text, message))
        return tuple(out)

    def load_timing(self, raw: object, scalars, types, operands) -> Timing:
        raw = self.keys(raw, _TIMING_KEYS, "'timing'", "timing")
        tv = {t: v[0] for t, v in types.items()}
        latency = self.expr(raw["latency"], "timing.latency", scalars=scalars, types=tv) if "latency" in raw \
            else None
        cycles = self.expr(raw["cycles"], "timing.cycles", scalars=scalars, types=tv) if "cycles" in raw \
            else None
        for name, e in (("latency", latency), ("cycles", cycles)):
            value = self.constant_value(e)
            if value is not None and value < 0:
                raise self.error(f"'{name}' must not be negative, but it is {value}", f"timing.{name}")
        unit = raw.get("unit")
        if unit is not None and not isinstance(unit, str):
            raise self.error("'unit' must be a string", "timing.unit")
        asynchronous = raw.get("async", False)
        if not isinstance(asynchronous, bool):
            raise self.error(f"'async' must be true or false, but it is {asynchronous!r}", "timing.async")
        if asynchronous and unit is None:
            raise self.error("an 'async' instruction needs the 'unit' that runs it in the background",
                             "timing.async")
        engine = self.expr(raw["engine"], "timing.engine", scalars=scalars, types=tv) if "engine" in raw \
            else None
        if engine is not None and unit is None:
            raise self.error("an 'engine' is one of a unit's engines: it needs the 'unit'", "timing.engine")
        value = self.constant_value(engine)
        if value is not None and value < 0:
            raise self.error(f"'engine' must not be negative, but it is {value}", "timing.engine")
        return Timing(unit, latency, cycles, raw.get("doc", ""), asynchronous, engine)

    def check_decodable(self, instructions: dict[str, Instruction], insn_bits: int | None) -> None:
        """Two encodable instructions must differ in some fixed bit, or a word could decode to both."""
        coded = [(i, fixed_pattern(i.format, i.fixed)) for i in instructions.values() if i.format is not None]
        for insn, _ in coded:
            if insn_bits is not None and insn.format.bits > insn_bits:
                raise self.error(f"format '{insn.format.name}' is {insn.format.bits} bits, wider than "
                                 f"insn_bits = {insn_bits}", "format", where=insn.name)
            if not insn.fixed:
                raise self.error("an encodable instruction needs 'fixed' field values that identify it",
                                 "fixed", where=insn.name)
        for k, (a, (ma, va)) in enumerate(coded):
            for b, (mb, vb) in coded[k + 1:]:
                if not (va ^ vb) & ma & mb:
                    raise self.error(f"instructions '{a.name}' and '{b.name}' cannot be told apart: their "
                                     "fixed fields agree on every shared bit", "fixed", where=b.name)


def _shape(op: Operand) -> str:
    return f"[{', '.join(map(str, op.shape))}]"
