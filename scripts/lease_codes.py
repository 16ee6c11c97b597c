#!/usr/bin/env python3
"""Regenerates the two copies of the lease-code list from `guest/core/src/error.rs` (the source
of truth): the WIT enum `lease-code` in `wit/proclease.wit` and the `lease_code_map!` list in
`wit/convert.rs`. `tests/tests/component_contract.rs` checks that they agree; run this after
adding a code to the core."""
import pathlib, re

root = pathlib.Path(__file__).resolve().parent.parent
error = (root / "guest/core/src/error.rs").read_text()
entries = re.findall(r'    /// `([^\n]*)`[^\n]*\n    (\w+) = "([a-z0-9-]+)", (\w+), ', error)

wit_path = root / "wit/proclease.wit"
wit = wit_path.read_text()
body = "".join(f"        /// `{text}`\n        {name},\n" for text, _, name, _ in entries)
wit = re.sub(r"(    enum lease-code \{\n).*?(    \}\n)", lambda m: m.group(1) + body + m.group(2), wit, count=1, flags=re.S)
wit_path.write_text(wit)

convert_path = root / "wit/convert.rs"
convert = convert_path.read_text()
variants = ",\n    ".join(variant for _, variant, _, _ in entries)
convert = re.sub(r"lease_code_map!\(\n.*?\n\);", "lease_code_map!(\n    " + variants + ",\n);", convert, count=1, flags=re.S)
convert_path.write_text(convert)
print(f"{len(entries)} lease codes")
