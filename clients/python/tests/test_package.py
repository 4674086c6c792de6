"""The package as a user gets it: the wheel built by the in-tree backend,
installed with pip into a fresh virtual environment with no network at all
(--no-index), in a project outside the repository, running a worker whose
side effect happens once across two concurrent deliveries and is replayed.
Also: pip builds the package from its directory and from the sdist with no
network, the archives are reproducible, and the backend's own parts."""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import unittest
import zipfile

from support import PACKAGE_ROOT, REPO, fresh, harness

sys.path.insert(0, os.path.join(PACKAGE_ROOT, "build_backend"))
import idem_build  # noqa: E402

VERSION = "v9.8.7-3-gabcdef1"
PEP440 = "9.8.7.post3+gabcdef1"

WORKER = textwrap.dedent('''
    """A worker of a project that installed idem-client: one delivery of one
    job, whose side effect is a line in an effect file."""
    import json, sys, time
    import idem

    url, token, namespace, key, effects = sys.argv[1:6]

    def charge(attempt):
        time.sleep(0.5)  # the work, long enough for the other delivery to arrive
        attempt.check()
        with open(effects, "a") as f:
            f.write(f"charged {key} {attempt.token}\\n")
        return {"charged": key, "token": str(attempt.token)}

    with idem.Client(url, token=token) as client:
        job = idem.Job(namespace, key, fingerprint=idem.fingerprint_json({"order": key}), lease_ttl=10)
        res = client.do(job, charge, wait=30)
    print(json.dumps({"replayed": res.replayed, "value": res.json(), "module": idem.__file__,
                      "version": idem.__version__}))
''')


def run(cmd, **kw):
    res = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300, **kw)
    if res.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited with {res.returncode}:\n{res.stdout}\n{res.stderr}")
    return res.stdout


def offline_env():
    """The environment for pip with no way to reach an index: no proxy
    settings and no pip config from the developer."""
    env = {k: v for k, v in os.environ.items()
           if not k.lower().endswith("_proxy") and not k.startswith("PIP_") and not k.startswith("PYTHON")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1",
               PIP_CONFIG_FILE=os.devnull, SOURCE_DATE_EPOCH="1700000000")
    return env


def tree_status():
    """What git says of clients/python besides bytecode: files a build left
    there would show."""
    out = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all", "clients/python"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    return sorted(line for line in out.splitlines() if "__pycache__" not in line)


class PackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tree_before = tree_status()
        cls.tmp = tempfile.mkdtemp(prefix="idem-python-package-")
        cls.dist = os.path.join(cls.tmp, "dist")
        out = run([sys.executable, os.path.join(PACKAGE_ROOT, "build_backend", "idem_build.py"), "--out", cls.dist,
                   "--version", VERSION], env=offline_env())
        cls.wheel, cls.sdist = out.split()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_archives(self):
        self.assertEqual(os.path.basename(self.wheel), f"idem_client-{PEP440}-py3-none-any.whl")
        self.assertEqual(os.path.basename(self.sdist), f"idem_client-{PEP440}.tar.gz")
        with zipfile.ZipFile(self.wheel) as z:
            names = set(z.namelist())
            meta = z.read(f"idem_client-{PEP440}.dist-info/METADATA").decode()
            version_py = z.read("idem/_version.py").decode()
            record = z.read(f"idem_client-{PEP440}.dist-info/RECORD").decode()
        self.assertIn("idem/py.typed", names)
        self.assertIn("idem/__main__.py", names)
        self.assertIn("idem/testkit.py", names)
        self.assertIn("idem/_testkit_words.py", names)
        self.assertFalse([n for n in names if "__pycache__" in n or n.startswith("tests/")], names)
        self.assertEqual(len(record.splitlines()), len(names), "RECORD lists every file")
        for line in ["Name: idem-client", f"Version: {PEP440}", "License: Apache-2.0", "Requires-Python: >=3.8",
                     "Classifier: License :: OSI Approved :: Apache Software License", "Classifier: Typing :: Typed"]:
            self.assertIn(line + "\n", meta)
        self.assertNotIn("Requires-Dist", meta, "the package needs the standard library alone")
        self.assertIn(f'__version__ = "{PEP440}"', version_py)
        with tarfile.open(self.sdist) as t:
            members = {m.name for m in t.getmembers()}
        base = f"idem_client-{PEP440}/"
        for name in ["PKG-INFO", "pyproject.toml", "README.md", "build_backend/idem_build.py", "src/idem/__init__.py",
                     "src/idem/py.typed"]:
            self.assertIn(base + name, members)

    def test_builds_are_reproducible(self):
        again = os.path.join(self.tmp, "again")
        out = run([sys.executable, os.path.join(PACKAGE_ROOT, "build_backend", "idem_build.py"), "--out", again,
                   "--version", VERSION], env=offline_env())
        for first, second in zip([self.wheel, self.sdist], out.split()):
            with open(first, "rb") as a, open(second, "rb") as b:
                self.assertEqual(a.read(), b.read(), os.path.basename(first))

    def test_installed_offline_in_a_fresh_venv_a_worker_runs_once_and_replays(self):
        h = harness("sqlite")
        project = os.path.join(self.tmp, "shop")  # a project of its own, outside the repository
        os.makedirs(project)
        env = offline_env()
        run([sys.executable, "-m", "venv", os.path.join(project, ".venv")], env=env)
        python = os.path.join(project, ".venv", "bin", "python")
        run([python, "-m", "pip", "install", "--no-index", self.wheel], env=env, cwd=project)
        show = run([python, "-m", "pip", "show", "idem-client"], env=env, cwd=project)
        self.assertIn(f"Version: {PEP440}", show)
        self.assertIn("License: Apache-2.0", show)
        with open(os.path.join(project, "worker.py"), "w") as f:
            f.write(WORKER)

        key, effects = fresh("order"), os.path.join(project, "effects.log")
        args = [python, "worker.py", h.url, h.tokens["worker"], h.namespaces["plain"], key, effects]
        procs = [subprocess.Popen(args, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(2)]
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, err)
            outs.append(json.loads(out))
        self.assertEqual(sorted(o["replayed"] for o in outs), [False, True], outs)
        self.assertEqual(outs[0]["value"], outs[1]["value"])
        for o in outs:
            self.assertTrue(o["module"].startswith(os.path.join(project, ".venv")), o["module"])
            self.assertEqual(o["version"], PEP440)
        with open(effects) as f:
            lines = f.read().splitlines()
        self.assertEqual(lines, [f"charged {key} {outs[0]['value']['token']}"], "the side effect ran once")

        replay = json.loads(run(args, cwd=project, env=env))
        self.assertEqual((replay["replayed"], replay["value"]), (True, outs[0]["value"]))
        with open(effects) as f:
            self.assertEqual(len(f.read().splitlines()), 1)

        # pip builds the package itself, from the directory (what `pip
        # install ./clients/python` does) and from the sdist, with no
        # network: the backend requires nothing.
        wheels = os.path.join(self.tmp, "pip-wheels")
        env_v = dict(env, IDEM_VERSION=VERSION)
        run([python, "-m", "pip", "wheel", "--no-index", "--no-deps", "-w", wheels, PACKAGE_ROOT], env=env_v, cwd=project)
        run([python, "-m", "pip", "wheel", "--no-index", "--no-deps", "-w", wheels, self.sdist], env=env, cwd=project)
        self.assertEqual(sorted(os.listdir(wheels)), [f"idem_client-{PEP440}-py3-none-any.whl"])
        self.assertEqual(tree_status(), self.tree_before, "building left files in the tree")


class BackendTest(unittest.TestCase):
    def test_versions(self):
        for describe, want in [("v1.2.3", "1.2.3"), ("v1.2.3-rc.1", "1.2.3rc1"), ("v1.2.3-5-gabc1234", "1.2.3.post5+gabc1234"),
                               ("v1.2.3-5-gabc1234-dirty", "1.2.3.post5+gabc1234.dirty"), ("v0.9.0-dirty", "0.9.0+dirty"),
                               ("abc1234", "0.0.0+gabc1234"), ("12a4554", "0.0.0+g12a4554"), ("devel", "0.0.0+devel"),
                               ("v0.0.0-20261201175430-12a4554a1b2c", "0.0.0.dev20261201175430+g12a4554a1b2c"),
                               ("v0.0.0-20261201175430-12a4554a1b2c+dirty", "0.0.0.dev20261201175430+g12a4554a1b2c.dirty"),
                               ("v1.2.4-0.20261201175430-12a4554a1b2c", "1.2.4.dev20261201175430+g12a4554a1b2c"),
                               ("v0.0.0-deploytest", "0.0.0+deploytest"), ("v1.2.3-my-build.7", "1.2.3+my.build.7")]:
            self.assertEqual(idem_build.pep440(describe), want, describe)
        with self.assertRaises(ValueError) as cm:
            idem_build.pep440("release one")
        self.assertIn("release one", str(cm.exception))

    def test_the_small_toml_reader_reads_pyproject_as_tomllib_does(self):
        with open(os.path.join(PACKAGE_ROOT, "pyproject.toml"), encoding="utf-8") as f:
            text = f.read()
        mini = idem_build._MiniToml(text).parse()
        try:
            import tomllib
        except ImportError:  # Python < 3.11: compare with what the file says
            self.assertEqual(mini["project"]["name"], "idem-client")
            self.assertEqual(mini["build-system"]["requires"], [])
            return
        self.assertEqual(mini, tomllib.loads(text))


if __name__ == "__main__":
    unittest.main()
