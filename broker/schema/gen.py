#!/usr/bin/env python3
"""Generates broker/src/wire/schema.rs: the layout of every request the
broker decodes, for the bounded pre-scan (`wire::scan`).

The layout is read from the request decoders of the `kafka-protocol` crate
(the version in Cargo.lock), which are generated from Kafka's JSON message
schemas: for each struct, its fields in order, each with the versions it is
present in and its wire type, which versions are flexible (compact lengths,
tagged fields), and its known tagged fields. The tests in `wire::scan` check
the result against the crate: every request the crate encodes, for every
version served, scans to exactly its length.

    python3 broker/schema/gen.py ~/.cargo/registry/src/*/kafka-protocol-0.15.1 \
        > broker/src/wire/schema.rs && cargo fmt -p purgatorio-broker
"""

import re
import sys

FILES = [
    "request_header", "produce_request", "fetch_request", "list_offsets_request",
    # ACLs, SCRAM credentials, DescribeCluster.
    "create_acls_request", "describe_acls_request", "delete_acls_request",
    "describe_user_scram_credentials_request", "alter_user_scram_credentials_request",
    "describe_cluster_request",
    "metadata_request", "api_versions_request", "find_coordinator_request",
    "join_group_request", "sync_group_request", "heartbeat_request",
    "leave_group_request", "offset_commit_request", "offset_fetch_request",
    "init_producer_id_request", "create_topics_request", "delete_topics_request",
    "list_groups_request", "describe_groups_request", "describe_configs_request",
    "create_partitions_request", "alter_configs_request", "incremental_alter_configs_request",
    "delete_records_request", "delete_groups_request", "offset_delete_request",
]

FIXED = {"Int8": 1, "Int16": 2, "UInt16": 2, "Int32": 4, "UInt32": 4, "Int64": 8,
         "Float64": 8, "Boolean": 1, "Uuid": 16}


def block(text, start):
    """The index after the brace block opening at text[start] == '{'."""
    assert text[start] == "{", text[start:start + 40]
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError("unbalanced")


def versions(cond, universe):
    """The versions in `universe` satisfying `cond` (`version >= 9 && ...`)."""
    out = set(universe)
    for part in cond.split("&&"):
        m = re.fullmatch(r"\s*version\s*(>=|<=|==|>|<)\s*(\d+)\s*", part)
        assert m, cond
        op, n = m.group(1), int(m.group(2))
        test = {">=": lambda v: v >= n, "<=": lambda v: v <= n, "==": lambda v: v == n,
                ">": lambda v: v > n, "<": lambda v: v < n}[op]
        out = {v for v in out if test(v)}
    return out


def split_if(expr):
    """(cond, then, rest-after-else or None) of an `if` expression."""
    assert expr.startswith("if "), expr[:60]
    open_at = expr.index("{")
    cond = expr[3:open_at].strip()
    end = block(expr, open_at)
    then = expr[open_at + 1:end - 1].strip()
    rest = expr[end:].strip()
    if rest.startswith("else"):
        rest = rest[4:].strip()
        if rest.startswith("{"):
            rest = rest[1:block(rest, 0) - 1].strip()
        return cond, then, rest
    return cond, then, None


def alternatives(expr, universe):
    """[(versions, kind text)] of an expression decoding one field."""
    expr = expr.strip()
    if expr.startswith("if "):
        cond, then, rest = split_if(expr)
        yes = versions(cond, universe)
        out = alternatives(then, yes)
        if rest is not None:
            out += alternatives(rest, set(universe) - yes)
        return out
    m = re.fullmatch(r"(types::.*)\.decode\(buf\)\?;?", expr, re.S)
    if m:
        return [(set(universe), m.group(1))] if universe else []
    return []  # a default value: nothing on the wire


def field_types(text, name):
    """{field: innermost type name} of `pub struct name`."""
    m = re.search(r"pub struct %s \{" % name, text)
    body = text[m.end() - 1:block(text, m.end() - 1)]
    out = {}
    for f, t in re.findall(r"pub (\w+): ([^,\n]+),", body):
        idents = re.findall(r"[A-Z]\w*", t)
        out[f] = idents[-1] if idents else t
    return out


# Files whose nested structs share their names with another file's
# (`AlterConfigsResource`): their constants take this prefix.
PREFIXES = {"incremental_alter_configs_request": "Incremental"}

# The file being generated.
CURRENT = [""]


def const(name):
    prefix = PREFIXES.get(CURRENT[0], "")
    if prefix and not name.startswith(prefix):
        name = prefix + name
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def kind(text, field, types):
    text = text.strip()
    m = re.fullmatch(r"types::(Compact)?Array\((.*)\)", text)
    if m:
        return "Kind::%sArray(%s)" % ("Compact" if m.group(1) else "", elem(m.group(2), field, types))
    return "Kind::One(%s)" % elem(text, field, types)


def elem(text, field, types):
    text = text.strip()
    if text.startswith("types::Struct"):
        return "Elem::Struct(&%s)" % const(types[field])
    name = text[len("types::"):]
    if name in FIXED:
        return "Elem::Fixed(%d)" % FIXED[name]
    return {"String": "Elem::Str", "CompactString": "Elem::CompactStr", "Bytes": "Elem::Bytes",
            "CompactBytes": "Elem::CompactBytes"}[name]


def ranges(vs):
    vs = sorted(vs)
    out = []
    for v in vs:
        if out and out[-1][1] == v - 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    return "&[%s]" % ", ".join("(%d, %d)" % (a, b) for a, b in out)


def schema(text, name):
    m = re.search(r"impl Decodable for %s \{" % name, text)
    body = text[m.end() - 1:block(text, m.end() - 1)]
    fn = body.index("fn decode")
    fn_open = body.index("{", fn)
    code = body[fn_open + 1:block(body, fn_open) - 1]
    # `version > N`, or `version != 0` for a message of one version.
    top = re.search(r"version > (\d+)", code)
    top = int(top.group(1)) if top else 0
    universe = set(range(top + 1))
    types = field_types(text, name)
    fields, tags, flexible = [], [], set()
    pos = code.index("}", code.index("bail!")) + 1
    while True:
        rest = code[pos:].lstrip()
        pos = len(code) - len(rest)
        if rest.startswith("Ok(Self"):
            break
        if rest.startswith("let mut unknown_tagged_fields"):
            pos += rest.index(";") + 1
            rest = code[pos:].lstrip()
            pos = len(code) - len(rest)
            if rest.startswith("if "):
                cond, then, _ = split_if(rest[:block(rest, rest.index("{"))])
                flexible = versions(cond, universe)
                pos += block(rest, rest.index("{"))
            else:
                # Flexible in every version: the tagged fields' loop as is.
                end = rest.index("Ok(Self")
                then, flexible = rest[:end], set(universe)
                pos += end
            arms = then[then.index("match tag {"):] if "match tag {" in then else ""
            for tag, arm_at in [(int(a.group(1)), a.end() - 1)
                                for a in re.finditer(r"\n\s*(\d+) => \{", arms)]:
                arm = arms[arm_at + 1:block(arms, arm_at) - 1].strip()
                if arm.startswith("if "):
                    c, t, _ = split_if(arm)
                    vs, assign = versions(c, flexible), t
                else:
                    vs, assign = flexible, arm
                am = re.fullmatch(r"(\w+) = (types::.*)\.decode\(buf\)\?;", assign.strip(), re.S)
                tags.append((tag, vs, kind(am.group(2), am.group(1), types)))
            continue
        m = re.match(r"let (mut )?(\w+) = ", rest)
        assert m, rest[:80]
        start = m.end()
        depth, i = 0, start
        while True:
            c = rest[i]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            elif c == ";" and depth == 0:
                break
            i += 1
        expr = rest[start:i]
        pos += i + 1
        if ".decode(buf)" not in expr:
            continue
        for vs, k in alternatives(expr, universe):
            fields.append((vs, kind(k, m.group(2), types)))
    return top, flexible, fields, tags


def main(root):
    out = ["//! Generated by `broker/schema/gen.py` from the request decoders of",
           "//! kafka-protocol 0.15.1; do not edit. Each struct: its fields in wire",
           "//! order with the versions they are present in, the flexible versions",
           "//! (compact lengths, tagged fields) and the known tagged fields.",
           "",
           "use super::scan::{Elem, Field, Kind, Schema, Tagged};", ""]
    for f in FILES:
        CURRENT[0] = f
        text = open("%s/src/messages/%s.rs" % (root, f)).read()
        for name in re.findall(r"impl Decodable for (\w+) \{", text):
            top, flexible, fields, tags = schema(text, name)
            out.append("/// `%s`." % name)
            out.append("pub static %s: Schema = Schema {" % const(name))
            out.append('    name: "%s",' % name)
            out.append("    max_version: %d," % top)
            out.append("    flexible: %s," % ranges(flexible))
            out.append("    fields: &[")
            for vs, k in fields:
                out.append("        Field { versions: %s, kind: %s }," % (ranges(vs), k))
            out.append("    ],")
            out.append("    tags: &[")
            for tag, vs, k in tags:
                out.append("        Tagged { tag: %d, versions: %s, kind: %s }," % (tag, ranges(vs), k))
            out.append("    ],")
            out.append("};")
            out.append("")
    print("\n".join(out))


main(sys.argv[1])
