#!/usr/bin/env python3
"""External-reader test: messages written by the project decode with another Avro
implementation (Debian's python3-avro) given nothing but the .avsc files, and messages
written by that implementation decode with the project's reader.

For every message type:
  1. `cmr-wire sample TYPE FILE` writes a message with the project's encoder (avro-c);
  2. this script checks the single-object header (C3 01 + CRC-64-AVRO fingerprint of the
     schema's Parsing Canonical Form, computed here from python-avro's canonical form),
     decodes the body with avro.io.DatumReader, and compares the result with what
     `cmr-wire decode FILE` prints;
  3. it writes the decoded datum back with avro.io.DatumWriter as a single-object
     message and has `cmr-wire decode` read it: the JSON must be identical.

For every past version of a schema (schemas/past/, which the project still reads):
  4. python-avro reads the project's sample as that version (fields added since
     dropped) and writes it under the past fingerprint, as an old writer would have;
  5. python-avro resolves that message to the current schema (Avro's resolution rules:
     the added fields take their defaults), and `cmr-wire decode` must print the same.

Usage: test_external_reader.py PATH-TO-cmr-wire SCHEMA-DIR
Prints 'N passed, N failed' and exits non-zero on any failure.
"""
import io
import json
import os
import subprocess
import sys
import tempfile

import avro.io
import avro.schema

EMPTY = 0xC15D213AA4D7A795


def crc64_avro(data: bytes) -> int:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (EMPTY & -(fp & 1))
        table.append(fp)
    fp = EMPTY
    for b in data:
        fp = (fp >> 8) ^ table[(fp ^ b) & 0xFF]
    return fp


def to_json_like(value, schema):
    """Renders a python-avro datum the way `cmr-wire decode` renders the C struct."""
    t = schema.type
    if t == "record":
        return {f.name: to_json_like(value[f.name], f.type) for f in schema.fields}
    if t == "union":
        if value is None:
            return None
        branch = [s for s in schema.schemas if s.type != "null"][0]
        return to_json_like(value, branch)
    if t == "array":
        return [to_json_like(v, schema.items) for v in value]
    if t == "map":
        return {k: to_json_like(v, schema.values) for k, v in value.items()}
    if t == "bytes":
        return {"length": len(value), "head": value[:16].hex()}
    if t == "fixed":
        return value.hex()
    return value


def check_past_versions(wire, schema_dir, schemas, tmp):
    """Steps 4 and 5 for every file of schemas/past/. Returns (passed, failed)."""
    past_dir = os.path.join(schema_dir, "past")
    passed = failed = 0
    for name in sorted(os.listdir(past_dir)) if os.path.isdir(past_dir) else []:
        if not name.endswith(".avsc"):
            continue
        try:
            with open(os.path.join(past_dir, name)) as f:
                old = avro.schema.parse(f.read())
            cur = schemas[old.name]
            fp = crc64_avro(old.canonical_form.encode())
            assert name.endswith(f".{fp:016x}.avsc"), f"the file's name does not carry its fingerprint {fp:016x}"
            sample = os.path.join(tmp, old.name + ".past.bin")
            subprocess.run([wire, "sample", old.name, sample], check=True)
            data = open(sample, "rb").read()
            datum = avro.io.DatumReader(cur, old).read(avro.io.BinaryDecoder(io.BytesIO(data[10:])))
            out = io.BytesIO()
            out.write(b"\xc3\x01" + fp.to_bytes(8, "little"))
            avro.io.DatumWriter(old).write(datum, avro.io.BinaryEncoder(out))
            written = os.path.join(tmp, name + ".bin")
            open(written, "wb").write(out.getvalue())
            resolved = avro.io.DatumReader(old, cur).read(avro.io.BinaryDecoder(io.BytesIO(out.getvalue()[10:])))
            ours = json.loads(subprocess.run([wire, "decode", written], check=True,
                                             capture_output=True, text=True).stdout)
            assert ours["type"] == old.name
            theirs = to_json_like(resolved, cur)
            assert ours["body"] == theirs, f"resolved values differ:\n ours   {ours['body']}\n python {theirs}"
            print(f"ok   {old.name:20} past version {fp:016x}  {len(out.getvalue())} bytes")
            passed += 1
        except Exception as e:  # report every version, then fail
            print(f"FAIL past version {name}: {e}")
            failed += 1
    return passed, failed


def main():
    wire, schema_dir = sys.argv[1], sys.argv[2]
    listing = subprocess.run([wire, "list"], check=True, capture_output=True, text=True).stdout
    types = [line.split()[0] for line in listing.splitlines()[1:] if line.strip()]
    schemas = {}
    for name in os.listdir(schema_dir):
        if name.endswith(".avsc"):
            with open(os.path.join(schema_dir, name)) as f:
                s = avro.schema.parse(f.read())
            schemas[s.name] = s
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for type_name in types:
            try:
                schema = schemas[type_name]
                path = os.path.join(tmp, type_name + ".bin")
                subprocess.run([wire, "sample", type_name, path], check=True)
                data = open(path, "rb").read()
                assert data[:2] == b"\xc3\x01", "magic"
                fp = int.from_bytes(data[2:10], "little")
                want = crc64_avro(schema.canonical_form.encode())
                assert fp == want, f"fingerprint {fp:016x} != python's {want:016x}"
                body = io.BytesIO(data[10:])
                datum = avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(body))
                assert body.tell() == len(data) - 10, "python did not consume the whole body"
                ours = json.loads(subprocess.run([wire, "decode", path], check=True,
                                                 capture_output=True, text=True).stdout)
                assert ours["type"] == type_name
                theirs = to_json_like(datum, schema)
                assert ours["body"] == theirs, f"decoded values differ:\n ours   {ours['body']}\n python {theirs}"

                # and back: python writes, the project reads
                out = io.BytesIO()
                out.write(b"\xc3\x01" + want.to_bytes(8, "little"))
                avro.io.DatumWriter(schema).write(datum, avro.io.BinaryEncoder(out))
                back = os.path.join(tmp, type_name + ".py.bin")
                open(back, "wb").write(out.getvalue())
                again = json.loads(subprocess.run([wire, "decode", back], check=True,
                                                  capture_output=True, text=True).stdout)
                assert again == ours, "python-written message decodes differently"
                print(f"ok   {type_name:20} fingerprint {fp:016x}  {len(data)} bytes")
                passed += 1
            except Exception as e:  # report every type, then fail
                print(f"FAIL {type_name}: {e}")
                failed += 1
        p, f = check_past_versions(wire, schema_dir, schemas, tmp)
        passed += p
        failed += f
    if len(types) != len(schemas):
        print(f"FAIL cmr-wire lists {len(types)} types but schemas/ has {len(schemas)} schemas")
        failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
