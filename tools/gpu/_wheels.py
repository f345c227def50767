"""Helpers of tools/gpu/fetch_wheels.sh (standard library only; any Python >= 3.8).

    _wheels.py DEST CPTAG have NAME==VERSION      exit 0 when DEST has that wheel, usable on CPTAG
    _wheels.py DEST CPTAG build-shim SHIM_DIR     build the Ray import shim wheel into DEST, print NAME==VERSION
                                                  (SHIM_DIR's files become the wheel's package ``ray``: the
                                                  folder is not named ``ray``, so no tool resolving imports
                                                  by path takes this repository's folder for Ray)
    _wheels.py DEST CPTAG prune REQ...            keep one wheel per REQ, delete every other wheel
"""

import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path

SHIM_NAME = "trajval_gpu_ray_import_shim"
SHIM_VERSION = "0.1.0"
#: the package the shim wheel installs, stood in for
SHIM_PACKAGE = "ray"


def norm(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def parse(whl):
    """(name, version, usable_on) of a wheel file; usable_on(cptag) says if it installs there."""
    parts = whl.name[:-4].split("-")
    name, version, pytags, abi = norm(parts[0]), parts[1], parts[-3].split("."), parts[-2]

    def usable_on(cptag):
        if abi == "abi3":
            return True
        versioned = [t for t in pytags if re.fullmatch(r"(cp|py)3\d+", t)]
        return not versioned or any(t[2:] == cptag[2:] for t in versioned)

    return name, version, usable_on


def split_req(req):
    name, _, version = req.partition("==")
    if not version:
        sys.exit(f"fetch_wheels: {req!r} is not pinned as name==version")
    return norm(name), version


def have(dest, cptag, req):
    want = split_req(req)
    for whl in dest.glob("*.whl"):
        name, version, usable_on = parse(whl)
        if (name, version) == want and usable_on(cptag):
            return 0
    return 1


def build_shim(dest, shim_dir):
    """A py3-none-any wheel of the `ray` stand-in (``shim_dir``'s files as the package ``ray``);
    byte-identical on every build."""
    shim_dir = Path(shim_dir)
    files = {}
    for path in sorted(shim_dir.rglob("*.py")):
        files[f"{SHIM_PACKAGE}/{path.relative_to(shim_dir).as_posix()}"] = path.read_bytes()
    info = f"{SHIM_NAME}-{SHIM_VERSION}.dist-info"
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {SHIM_NAME}\nVersion: {SHIM_VERSION}\n"
        "Summary: A stand-in `ray` package for trajval_ops on a machine without Ray "
        "(tools/gpu/ray_import_shim); never install it next to Ray\n"
    ).encode()
    files[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: trajval_ops tools/gpu/_wheels.py\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n"
    ).encode()
    files[f"{info}/top_level.txt"] = f"{SHIM_PACKAGE}\n".encode()
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out = Path(dest) / f"{SHIM_NAME}-{SHIM_VERSION}-py3-none-any.whl"
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            entry = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, data)
    if out.is_file() and out.read_bytes() == tmp.read_bytes():
        tmp.unlink()
    else:
        tmp.replace(out)
    print(f"{SHIM_NAME}=={SHIM_VERSION}")
    return 0


def prune(dest, cptag, reqs):
    want = dict(split_req(r) for r in reqs)
    found = {}
    for whl in sorted(dest.glob("*.whl")):
        name, version, usable_on = parse(whl)
        if want.get(name) != version or not usable_on(cptag):
            whl.unlink()
            continue
        if name in found:
            sys.exit(f"fetch_wheels: two wheels for {name}: {found[name]} and {whl.name}")
        found[name] = whl.name
    missing = sorted(set(want) - set(found))
    if missing:
        sys.exit(f"fetch_wheels: FAILED, no wheel in {dest} for: {', '.join(missing)}")
    print(f"fetch_wheels: {len(found)} wheels for {cptag} in {dest}")
    return 0


def main(argv):
    dest, cptag, command, *args = argv
    dest = Path(dest)
    if command == "have":
        return have(dest, cptag, args[0])
    if command == "build-shim":
        return build_shim(dest, args[0])
    if command == "prune":
        return prune(dest, cptag, args)
    sys.exit(f"_wheels.py: unknown command {command!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
