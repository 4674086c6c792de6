"""The PEP 517 build backend of idem-client, on the standard library alone.

pip builds a package in an isolated environment into which it first installs
the backend that pyproject.toml's [build-system] requires, from the package
index: setuptools or hatchling, which a machine without network does not
have. This backend needs nothing (``requires = []``, found through
``backend-path``), so ``pip install ./clients/python`` works with no network
at all. The package is pure Python with no build step, so the backend only
lays files out: a wheel (``py3-none-any``), an sdist, and an editable wheel
(PEP 660) that points at src/.

The version, in order: ``config_settings["version"]`` or $IDEM_VERSION (``make
release`` passes the binaries' VERSION), the PKG-INFO of an sdist being
built, ``make version`` (the Makefile's VERSION, from git), and otherwise
0.0.0+unknown. pep440() makes it a PEP 440 version. It is written into idem/_version.py in what is built.

Built twice from the same tree with the same SOURCE_DATE_EPOCH, the archives
are byte for byte the same.

Run as a script it builds both archives:

    python3 build_backend/idem_build.py --out dist [--version v1.2.3]
"""

import base64
import gzip
import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
import time
import zipfile
from typing import Any, Dict, List, Mapping, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIST_NAME = "idem_client"  # the distribution's name as file names spell it
PACKAGE = "idem"
WHEEL_TAG = "py3-none-any"

__all__ = ["build_wheel", "build_sdist", "build_editable", "get_requires_for_build_wheel",
           "get_requires_for_build_sdist", "get_requires_for_build_editable", "prepare_metadata_for_build_wheel",
           "prepare_metadata_for_build_editable", "pep440", "read_toml"]


# ---------------------------------------------------------------------------
# The PEP 517 and PEP 660 hooks


def get_requires_for_build_wheel(config_settings: Optional[Mapping[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Mapping[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Mapping[str, Any]] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[Mapping[str, Any]] = None) -> str:
    project = _Project(ROOT, config_settings)
    info = os.path.join(metadata_directory, project.dist_info)
    os.makedirs(info, exist_ok=True)
    for name, data in project.dist_info_files():
        with open(os.path.join(info, name), "wb") as f:
            f.write(data)
    return project.dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Optional[Mapping[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    project = _Project(ROOT, config_settings)
    return project.write_wheel(wheel_directory, project.package_files())


def build_editable(wheel_directory: str, config_settings: Optional[Mapping[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    project = _Project(ROOT, config_settings)
    # A .pth file puts src/ on sys.path: the installed package is the tree.
    pth = (os.path.join(ROOT, "src") + "\n").encode("utf-8")
    return project.write_wheel(wheel_directory, [(f"__editable__.{DIST_NAME}.pth", pth)])


def build_sdist(sdist_directory: str, config_settings: Optional[Mapping[str, Any]] = None) -> str:
    project = _Project(ROOT, config_settings)
    return project.write_sdist(sdist_directory)


# ---------------------------------------------------------------------------
# Versions


_DESCRIBE = re.compile(
    r"^v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:-?(?P<pre>a|alpha|b|beta|c|rc|pre|preview)\.?(?P<pre_n>\d+)?)?"
    r"(?:-(?P<distance>\d+)-g(?P<hash>[0-9a-f]{4,40}))?"
    r"(?P<dirty>[+-]dirty)?$")
_HASH = re.compile(r"^(?P<hash>[0-9a-f]{7,40})(?P<dirty>-dirty)?$")
# A Go pseudo-version, which the Makefile's VERSION is before the first tag:
# v0.0.0-20261201175430-12a4554a1b2c (also v1.2.4-0.20261201175430-…).
_PSEUDO = re.compile(r"^v?(?P<release>\d+(?:\.\d+)*)-(?:0\.)?(?P<ts>\d{14})-(?P<hash>[0-9a-f]{12})"
                     r"(?P<dirty>[+-]dirty)?$")
# Any other semver pre-release, v1.2.3-LABEL: the label becomes a local one.
_SEMVER_PRE = re.compile(r"^v?(?P<release>\d+\.\d+\.\d+)-(?P<label>[0-9A-Za-z][0-9A-Za-z.-]*)$")
_PRE = {"a": "a", "alpha": "a", "b": "b", "beta": "b", "c": "rc", "rc": "rc", "pre": "rc", "preview": "rc"}


def pep440(describe: str) -> str:
    """The PEP 440 form of a version as the Makefile's VERSION (git describe
    --tags --always --dirty) writes it:

    - v1.2.3 -> 1.2.3; v1.2.3-rc.1 -> 1.2.3rc1
    - v1.2.3-5-gabc1234 (5 commits after the tag) -> 1.2.3.post5+gabc1234
    - a trailing -dirty (or +dirty) adds the local label "dirty": 1.2.3+dirty
    - a Go pseudo-version, v0.0.0-20261201175430-12a4554a1b2c (no tag yet)
      -> 0.0.0.dev20261201175430+g12a4554a1b2c
    - abc1234 (a bare commit hash) -> 0.0.0+gabc1234; devel -> 0.0.0+devel
    - any other semver pre-release, v1.2.3-some.label -> 1.2.3+some.label

    Anything else is a ValueError naming the version."""
    v = describe.strip()
    # git describe --always writes an abbreviated hash (7 or more hex
    # digits) when no tag precedes the commit; a tag has dots or a "v".
    h = _HASH.match(v)
    m = None if h else _DESCRIBE.match(v)
    pseudo = _PSEUDO.match(v)
    local: List[str] = []
    if pseudo:
        out = f"{pseudo.group('release')}.dev{pseudo.group('ts')}"
        local.append("g" + pseudo.group("hash"))
        if pseudo.group("dirty"):
            local.append("dirty")
    elif m:
        out = m.group("release")
        if m.group("pre"):
            out += _PRE[m.group("pre")] + (m.group("pre_n") or "0")
        if m.group("distance"):
            out += f".post{m.group('distance')}"
            local.append("g" + m.group("hash"))
        if m.group("dirty"):
            local.append("dirty")
    elif h:
        out = "0.0.0"
        local.append("g" + h.group("hash"))
        if h.group("dirty"):
            local.append("dirty")
    elif v == "devel":
        out, local = "0.0.0", ["devel"]
    elif _SEMVER_PRE.match(v):
        sp = _SEMVER_PRE.match(v)
        out, local = sp.group("release"), [re.sub(r"[-.]+", ".", sp.group("label")).strip(".")]
    else:
        raise ValueError(f"idem_build: version {describe!r} is not a tag (v1.2.3), a git description "
                         "(v1.2.3-5-gabc1234[-dirty]), a commit hash or devel")
    return out + ("+" + ".".join(local) if local else "")


def _git_version(root: str) -> Optional[str]:
    """The Makefile's VERSION (make version) of the checkout root is in, if
    it is one and make and git are there."""
    repo = os.path.dirname(os.path.dirname(root))
    if not os.path.isfile(os.path.join(repo, "Makefile")):
        return None
    try:
        res = subprocess.run(["make", "--no-print-directory", "-s", "version"], cwd=repo, capture_output=True,
                             text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    out = res.stdout.strip()
    if res.returncode != 0 or not out or out == "devel":
        return None
    return out


# ---------------------------------------------------------------------------
# pyproject.toml


def read_toml(text: str) -> Dict[str, Any]:
    """Reads the TOML of pyproject.toml: tomllib where Python has it (3.11+),
    otherwise the subset this package's pyproject.toml uses (tables, bare
    keys, strings, integers, booleans, arrays and inline tables; a test
    checks that both read it alike)."""
    try:
        import tomllib  # type: ignore[import-not-found]
    except ImportError:
        return _MiniToml(text).parse()
    return tomllib.loads(text)


class _MiniToml:
    def __init__(self, text: str):
        self.s = text
        self.i = 0

    def fail(self, what: str) -> ValueError:
        line = self.s.count("\n", 0, self.i) + 1
        return ValueError(f"pyproject.toml line {line}: {what}")

    def skip(self, newlines: bool) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t\r" or (newlines and c == "\n"):
                self.i += 1
            elif c == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
            else:
                return

    def parse(self) -> Dict[str, Any]:
        doc: Dict[str, Any] = {}
        table = doc
        while True:
            self.skip(True)
            if self.i >= len(self.s):
                return doc
            if self.s[self.i] == "[":
                end = self.s.index("]", self.i)
                table = doc
                for part in self.s[self.i + 1:end].strip().split("."):
                    table = table.setdefault(part.strip(), {})
                self.i = end + 1
            else:
                k = self.key()
                self.skip(False)
                if self.s[self.i:self.i + 1] != "=":
                    raise self.fail(f"expected = after {k}")
                self.i += 1
                self.skip(False)
                table[k] = self.value()
            self.skip(False)
            if self.i < len(self.s) and self.s[self.i] != "\n":
                raise self.fail("expected the end of the line")

    def key(self) -> str:
        m = re.compile(r"[A-Za-z0-9_-]+").match(self.s, self.i)
        if m:
            self.i = m.end()
            return m.group(0)
        if self.s[self.i:self.i + 1] == '"':
            return self.string()
        raise self.fail("expected a key")

    def value(self) -> Any:
        c = self.s[self.i:self.i + 1]
        if c in ('"', "'"):
            return self.string()
        if c == "[":
            self.i += 1
            out = []
            while True:
                self.skip(True)
                if self.s[self.i:self.i + 1] == "]":
                    self.i += 1
                    return out
                out.append(self.value())
                self.skip(True)
                if self.s[self.i:self.i + 1] == ",":
                    self.i += 1
                elif self.s[self.i:self.i + 1] != "]":
                    raise self.fail("expected , or ] in an array")
        if c == "{":
            self.i += 1
            table: Dict[str, Any] = {}
            while True:
                self.skip(False)
                if self.s[self.i:self.i + 1] == "}":
                    self.i += 1
                    return table
                k = self.key()
                self.skip(False)
                if self.s[self.i:self.i + 1] != "=":
                    raise self.fail(f"expected = after {k}")
                self.i += 1
                self.skip(False)
                table[k] = self.value()
                self.skip(False)
                if self.s[self.i:self.i + 1] == ",":
                    self.i += 1
        m = re.compile(r"true|false|[+-]?\d+").match(self.s, self.i)
        if m:
            self.i = m.end()
            t = m.group(0)
            return t == "true" if t in ("true", "false") else int(t)
        raise self.fail("expected a value this reader knows (string, integer, boolean, array, inline table)")

    def string(self) -> str:
        quote = self.s[self.i]
        if self.s.startswith(quote * 3, self.i):
            raise self.fail("multi-line strings are not supported")
        self.i += 1
        out = []
        while True:
            if self.i >= len(self.s) or self.s[self.i] == "\n":
                raise self.fail("unterminated string")
            c = self.s[self.i]
            self.i += 1
            if c == quote:
                return "".join(out)
            if c == "\\" and quote == '"':
                e = self.s[self.i]
                self.i += 1
                if e in "uU":
                    n = 4 if e == "u" else 8
                    out.append(chr(int(self.s[self.i:self.i + n], 16)))
                    self.i += n
                else:
                    simple = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}
                    if e not in simple:
                        raise self.fail(f"unknown escape \\{e}")
                    out.append(simple[e])
            else:
                out.append(c)


# ---------------------------------------------------------------------------
# What is built


def _source_date() -> Tuple[int, int, int, int, int, int]:
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))  # 1980-01-01, the earliest a zip holds
    t = time.gmtime(max(epoch, 315532800))
    return t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec


class _Project:
    def __init__(self, root: str, config_settings: Optional[Mapping[str, Any]]):
        self.root = root
        with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as f:
            self.pyproject_text = f.read()
        self.project: Dict[str, Any] = read_toml(self.pyproject_text)["project"]
        if self.project.get("dependencies"):
            raise ValueError("idem_build: the package must need the standard library alone; "
                             f"pyproject.toml has dependencies {self.project['dependencies']}")
        self.version = self._version(config_settings)
        self.dist_info = f"{DIST_NAME}-{self.version}.dist-info"
        self.license = self._find_license()

    def _version(self, config_settings: Optional[Mapping[str, Any]]) -> str:
        given = (config_settings or {}).get("version") or os.environ.get("IDEM_VERSION")
        if given:
            return pep440(str(given))
        pkg_info = os.path.join(self.root, "PKG-INFO")
        if os.path.exists(pkg_info):  # an sdist: its version is settled
            with open(pkg_info, encoding="utf-8") as f:
                for line in f:
                    if line.startswith("Version: "):
                        return line[len("Version: "):].strip()
        described = _git_version(self.root)
        return pep440(described) if described else "0.0.0+unknown"

    def _find_license(self) -> Optional[bytes]:
        # In the repository the license is at its root; in an sdist, beside
        # pyproject.toml.
        for path in (os.path.join(self.root, "LICENSE"), os.path.join(self.root, "..", "..", "LICENSE")):
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    return f.read()
        return None

    def metadata(self) -> bytes:
        p = self.project
        lines = [
            "Metadata-Version: 2.1",
            f"Name: {p['name']}",
            f"Version: {self.version}",
            f"Summary: {p['description']}",
        ]
        if p.get("keywords"):
            lines.append("Keywords: " + ",".join(p["keywords"]))
        lic = p.get("license")
        if isinstance(lic, dict) and lic.get("text"):
            lines.append(f"License: {lic['text']}")
        elif isinstance(lic, str):
            lines.append(f"License: {lic}")
        lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
        if p.get("requires-python"):
            lines.append(f"Requires-Python: {p['requires-python']}")
        lines += [f"Project-URL: {k}, {v}" for k, v in (p.get("urls") or {}).items()]
        readme = p.get("readme")
        body = ""
        if readme:
            lines.append("Description-Content-Type: text/markdown")
            with open(os.path.join(self.root, readme), encoding="utf-8") as f:
                body = f.read()
        return ("\n".join(lines) + "\n\n" + body).encode("utf-8")

    def dist_info_files(self) -> List[Tuple[str, bytes]]:
        files = [
            ("METADATA", self.metadata()),
            ("WHEEL", (f"Wheel-Version: 1.0\nGenerator: idem_build\nRoot-Is-Purelib: true\n"
                       f"Tag: {WHEEL_TAG}\n").encode("ascii")),
        ]
        if self.license is not None:
            files.append(("LICENSE", self.license))
        return files

    def package_files(self) -> List[Tuple[str, bytes]]:
        """The package's files as a wheel holds them: src/idem/**, with the
        version written into _version.py."""
        src = os.path.join(self.root, "src")
        out = []
        for dirpath, dirnames, filenames in os.walk(os.path.join(src, PACKAGE)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if not (name.endswith(".py") or name == "py.typed"):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, src).replace(os.sep, "/")
                if rel == f"{PACKAGE}/_version.py":
                    data = self.version_file()
                else:
                    with open(path, "rb") as f:
                        data = f.read()
                out.append((rel, data))
        return out

    def version_file(self) -> bytes:
        return (f'# Written by the build backend (build_backend/idem_build.py).\n'
                f'__version__ = "{self.version}"\n').encode("utf-8")

    def write_wheel(self, directory: str, files: List[Tuple[str, bytes]]) -> str:
        name = f"{DIST_NAME}-{self.version}-{WHEEL_TAG}.whl"
        entries = list(files) + [(f"{self.dist_info}/{n}", d) for n, d in self.dist_info_files()]
        record = "".join(f"{path},sha256={_digest(data)},{len(data)}\n" for path, data in entries)
        record += f"{self.dist_info}/RECORD,,\n"
        entries.append((f"{self.dist_info}/RECORD", record.encode("utf-8")))
        date = _source_date()
        os.makedirs(directory, exist_ok=True)
        with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
            for path, data in entries:
                info = zipfile.ZipInfo(path, date_time=date)
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, data)
        return name

    def sdist_files(self) -> List[Tuple[str, bytes]]:
        def read(rel: str) -> bytes:
            with open(os.path.join(self.root, rel), "rb") as f:
                return f.read()

        files = [("PKG-INFO", self.metadata()), ("pyproject.toml", self.pyproject_text.encode("utf-8")),
                 ("README.md", read("README.md")), ("build_backend/idem_build.py", read("build_backend/idem_build.py"))]
        if self.license is not None:
            files.append(("LICENSE", self.license))
        files += [("src/" + rel, data) for rel, data in self.package_files()]
        return files

    def write_sdist(self, directory: str) -> str:
        base = f"{DIST_NAME}-{self.version}"
        name = base + ".tar.gz"
        mtime = max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800)
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, name), "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=mtime) as gz:
                with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    dirs = set()
                    for path, data in self.sdist_files():
                        parts = path.split("/")[:-1]
                        for i in range(len(parts)):
                            d = "/".join(parts[:i + 1])
                            if d not in dirs:
                                dirs.add(d)
                                tar.addfile(_tarinfo(f"{base}/{d}", mtime, directory=True))
                        info = _tarinfo(f"{base}/{path}", mtime)
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
        return name


def _tarinfo(name: str, mtime: int, directory: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if directory:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    else:
        info.mode = 0o644
    return info


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def main(argv: Optional[List[str]] = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="idem_build.py", description="Build idem-client's wheel and sdist.")
    p.add_argument("--out", required=True, help="directory to write them to")
    p.add_argument("--version", help="the version (as the Makefile's VERSION); default as for pip (see the top)")
    args = p.parse_args(argv)
    settings = {"version": args.version} if args.version else None
    print(os.path.join(args.out, build_wheel(args.out, settings)))
    print(os.path.join(args.out, build_sdist(args.out, settings)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
