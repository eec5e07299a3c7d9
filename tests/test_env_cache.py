"""The kit environments in the per-user cache: built once by one command while others wait, found damaged and built
again, listed and pruned. A tiny lock file pins the pip wheel the interpreter bundles (ensurepip), so every build is
real (venv, then pip installing from a hash-pinned lock) and needs no network."""
from __future__ import annotations

import ensurepip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import REPO

from reprokit.environments import env_cache, envs, requirement_sets
from reprokit.errors import UserError
from reprokit.results.provenance import sha256_file
from reprokit.results.quarantine import QUARANTINE

NAME = "tiny"
PIP_WHEEL = next((Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"))
PIP_DIST_INFO = PIP_WHEEL.name.split("-py3")[0] + ".dist-info"      # pip-23.2.1.dist-info

# One command that needs the tiny env: it prints what build() says; told to, it stops once it has begun building,
# until a line comes on its stdin, so that a second command finds the build under way.
NEEDS_ENV = """
import sys
from pathlib import Path
from reprokit.environments import envs
envs.LOCKS = Path(sys.argv[1])
def log(line):
    print(line, flush=True)
    if line.startswith("building") and sys.argv[3] == "pause":
        sys.stdin.readline()
print("ready", envs.build(Path(sys.argv[2]), "tiny", log), flush=True)
"""


@pytest.fixture
def locks(tmp_path, monkeypatch):
    """A locks/ folder holding tiny.txt, in place of the kit's."""
    folder = tmp_path / "locks"
    folder.mkdir()
    (folder / f"{NAME}.txt").write_text(f"pip @ {PIP_WHEEL.as_uri()} --hash=sha256:{sha256_file(PIP_WHEEL)}\n")
    monkeypatch.setattr(envs, "LOCKS", folder)
    return folder


def _needs_env(locks: Path, root: Path, pause: bool, **kwargs) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", NEEDS_ENV, str(locks), str(root), "pause" if pause else "go"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def test_two_commands_that_need_one_environment_build_it_once(tmp_path, locks):
    """The second waits, says once which process builds it, then finds it ready (it builds nothing itself)."""
    root = tmp_path / "cache" / "envs"
    env = envs.env_dir(root, NAME)
    first = _needs_env(locks, root, pause=True, stdin=subprocess.PIPE)
    assert first.stdout.readline().startswith(f"building the {NAME} environment from locks/{NAME}.txt into {env} "
                                              f"(once per lock file on this machine")
    second = _needs_env(locks, root, pause=False, stdin=subprocess.DEVNULL)
    waited = second.stdout.readline()            # said before it blocks on the lock
    assert waited.startswith(f"waiting for the {NAME} environment in {env} to be built: pid {first.pid} (`"), waited
    first_out, _ = first.communicate("go on\n", timeout=300)
    second_out, _ = second.communicate(timeout=300)
    assert first.returncode == 0 and second.returncode == 0, first_out + second_out
    assert f"built the {NAME} environment in " in first_out
    assert second_out == f"ready {envs.python_of(env)}\n"
    assert envs.ready(root, NAME) and (env / envs.LAST_USED).exists()


def test_a_half_built_or_damaged_environment_is_said_and_built_again(tmp_path, locks, capsys):
    root = tmp_path / "envs"
    env = envs.env_dir(root, NAME)
    (env / "bin").mkdir(parents=True)                    # a build cut short before its marker
    said: list[str] = []
    envs.build(root, NAME, said.append)
    assert said[0] == f"the {NAME} environment in {env} was half-built (no completion marker): building it again"
    assert said[1].startswith(f"building the {NAME} environment") and said[2].startswith(f"built the {NAME}")
    marker = json.loads((env / envs.COMPLETE).read_text())
    assert marker["lock_sha256"] == sha256_file(locks / f"{NAME}.txt") and marker["python"] == sys.version
    assert PIP_DIST_INFO in marker["dist_info"] and (env / marker["site_packages"] / PIP_DIST_INFO).is_dir()

    last_used = env / envs.LAST_USED
    os.utime(last_used, (0, 0))
    said.clear()
    assert envs.build(root, NAME, said.append) == envs.python_of(env) and said == []      # whole: used as it is
    assert last_used.stat().st_mtime > 0

    site = env / marker["site_packages"]
    for dist_info in site.glob(f"{PIP_DIST_INFO}/*"):
        dist_info.unlink()
    (site / PIP_DIST_INFO).rmdir()                       # a package deleted by hand
    assert not envs.ready(root, NAME)
    envs.build(root, NAME, said.append)
    assert said[0] == f"the {NAME} environment in {env} is damaged ({PIP_DIST_INFO} is gone): building it again"
    assert envs.ready(root, NAME)
    envs.python_of(env).unlink()
    said.clear()
    envs.build(root, NAME, said.append)
    assert said[0] == f"the {NAME} environment in {env} is damaged (its python is missing): building it again"

    text = (env / envs.COMPLETE).read_bytes()
    (env / envs.COMPLETE).write_bytes(text[: len(text) // 2])      # a marker cut short (a crash while written)
    capsys.readouterr()
    envs.build(root, NAME, said.append)
    err = capsys.readouterr().err
    assert err.startswith(f"the completion marker of the {NAME} environment in {env} was damaged (unterminated JSON); "
                          f"moved to {root / QUARANTINE}/") and err.rstrip().endswith("; building it again")
    assert len(list((root / QUARANTINE).iterdir())) == 1 and envs.ready(root, NAME)


def test_an_edited_lock_file_gets_a_folder_of_its_own(tmp_path, locks):
    root = tmp_path / "envs"
    before = envs.env_dir(root, NAME)
    envs.build(root, NAME, lambda line: None)
    with (locks / f"{NAME}.txt").open("a") as lock:
        lock.write("# edited by hand\n")
    after = envs.env_dir(root, NAME)
    assert after != before and after.name.endswith(f"-py{sys.version_info.major}{sys.version_info.minor}")
    assert not envs.ready(root, NAME)
    envs.build(root, NAME, lambda line: None)
    assert envs.ready(root, NAME) and (before / envs.COMPLETE).exists()       # the other one is left as it was


def test_cache_list_and_prune_keep_what_is_in_use(tmp_path, locks, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("REPROKIT_CACHE", str(cache))
    root = cache / "envs"
    env = envs.env_dir(root, NAME)
    envs.build(root, NAME, lambda line: None)
    (cache / "certificates").mkdir()
    (cache / "certificates" / "k1.json").write_text("{}")

    listed = env_cache.list_text(root).splitlines()
    assert listed[0] == f"environments in {root} (REPROKIT_CACHE moves the cache):"
    assert listed[1].split()[0] == env.name and listed[1].endswith(" MB  last used today, not in use")
    assert listed[2] == f"certificates in {cache / 'certificates'}: 1 entry, 0 MB"
    assert env_cache.prune(root, 30).startswith(f"nothing to remove in {root}: every environment's lock file is in")

    os.utime(env / envs.LAST_USED, (0, 0))                # last used long ago, but a command runs its python now
    running = subprocess.Popen([envs.python_of(env), "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert running.stdout.readline() == "up\n"
        assert f"in use: pid {running.pid} runs its python" in env_cache.list_text(root)
        kept = env_cache.prune(root, 30)
        assert kept.startswith(f"kept {env.name} (not used for ") and f"in use, pid {running.pid} runs its python" in kept
        assert envs.ready(root, NAME)
    finally:
        running.communicate("")
    removed = env_cache.prune(root, 30).splitlines()
    assert removed[0].startswith(f"removed {env.name} (not used for ") and removed[-1].startswith("freed ")
    assert not env.exists()


def test_the_cache_verb_prunes_an_environment_whose_lock_file_is_gone(tmp_path, locks):
    cache = tmp_path / "cache"
    env = envs.env_dir(cache / "envs", NAME)
    envs.build(cache / "envs", NAME, lambda line: None)

    def verb(*args: str) -> str:              # the kit's own locks/, which has no tiny.txt
        proc = subprocess.run([sys.executable, "-m", "reprokit", "cache", *args], cwd=REPO, capture_output=True,
                              text=True, env={**os.environ, "REPROKIT_CACHE": str(cache)}, timeout=120)
        assert proc.returncode == 0, proc.stderr
        where, _, rest = proc.stdout.partition("\n")          # every command's first line: its folders
        assert where.startswith("state: ") and "  reports: " in where, where
        return rest
    assert f"{env.name} " in verb("list") and f"locks/{NAME}.txt has changed or is gone" in verb("list")
    out = verb("prune").splitlines()
    assert out[0].startswith(f"removed {env.name} (locks/{NAME}.txt has changed or is gone): ")
    assert out[1].startswith("freed ") and out[1].endswith(f" in {cache / 'envs'}") and not env.exists()
    assert verb("list") == f"no environments in {cache / 'envs'} yet: a local run builds them there " \
                           f"(REPROKIT_CACHE moves the cache)\n"


def test_a_cache_that_cannot_be_written_is_said_in_one_sentence(tmp_path, locks):
    (tmp_path / "a-file").write_text("")          # a folder under a file: unwritable even to root
    root = tmp_path / "a-file" / "envs"
    with pytest.raises(UserError) as caught:
        envs.build(root, NAME, lambda line: None)
    assert str(caught.value).startswith(f"the environment cache {root} cannot be written (")
    assert str(caught.value).endswith("make it writable, or set REPROKIT_CACHE to a folder you can write.")


def test_a_build_the_disk_has_no_room_for_is_refused_before_it_starts(tmp_path):
    envs.check_room(tmp_path, "jax-cpu", free_bytes=2e9)             # 0.8 GB measured, with margin
    with pytest.raises(UserError) as caught:
        envs.check_room(tmp_path, "pytorch", free_bytes=3e9)
    assert str(caught.value) == (
        f"the pytorch environment needs about 7.7 GB free in {tmp_path} and 3.0 GB are: free some space "
        f"(`reprokit cache prune` removes unused environments), or set REPROKIT_CACHE to a folder on another disk.")
    assert envs.needed_bytes("a-lock-not-measured") > envs.needed_bytes("pytorch")


def test_cache_list_and_prune_cover_the_requirement_sets_and_their_wheels(tmp_path, monkeypatch):
    from test_requirement_sets import FACTS, wheel
    cache = tmp_path / "cache"
    for name, value in (("REPROKIT_CACHE", cache), ("PIP_NO_INDEX", "1"), ("PIP_FIND_LINKS", tmp_path / "mirror")):
        monkeypatch.setenv(name, str(value))
    alpha, shared, gamma = (wheel(tmp_path / "mirror", name) for name in ("rk_alpha", "rk_shared", "rk_gamma"))
    first = requirement_sets.install([alpha, shared], FACTS, "one.py", lambda line: None)
    second = requirement_sets.install([shared, gamma], FACTS, "two.py", lambda line: None)
    root = cache / "envs"

    listed = env_cache.list_text(root).splitlines()
    assert listed[0] == f"no environments in {root} yet: a local run builds them there (REPROKIT_CACHE moves the cache)"
    assert listed[1] == f"requirement sets in {cache / 'requirement-sets'} (installed once, read by every run of them):"
    by_name = {line.split()[0]: line for line in listed[2:4]}
    assert by_name[first.name].endswith(" MB  rk-alpha==1.0 and 1 more; last used today, not in use")
    assert by_name[second.name].endswith(" MB  rk-shared==1.0 and 1 more; last used today, not in use")
    assert listed[4] == "2 requirement sets, 0 MB on disk (a file two sets share counted once)"
    assert listed[5] == f"wheels in {cache / 'wheels'}: 3 files, 0 MB"
    assert env_cache.prune(root, 30) == (f"nothing to remove in {root}: it holds no environments; every requirement "
                                         f"set and wheel in {cache} was used in the last 30 days")

    half = cache / "requirement-sets" / "python-0123456789abcdef"
    (half / "rk_alpha").mkdir(parents=True)               # an install cut short before its marker
    running = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()",
                                str(first)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert running.stdout.readline() == "up\n"
        assert f"{first.name}" in env_cache.list_text(root) and \
            f"in use: pid {running.pid} runs with it" in env_cache.list_text(root)
        pruned = env_cache.prune(root, 0).splitlines()
        assert set(pruned[:3]) == {f"kept {first.name} (not used for 0 days): it is in use, pid {running.pid} runs "
                                   f"with it",
                                   f"removed the requirement set {half.name} (half-installed): 0 MB",
                                   f"removed the requirement set {second.name} (not used for 0 days): 0 MB"}
        assert pruned[3:] == ["removed 1 wheel that no installed set uses, none used for 0 days",
                              f"freed 0 MB of requirement sets and wheels in {cache}"]
        assert requirement_sets.ready(first) and not second.exists() and not half.exists()
        assert sorted(p.name for p in (cache / "wheels").iterdir()) == ["rk_alpha-1.0-py3-none-any.whl",
                                                                        "rk_shared-1.0-py3-none-any.whl"]
    finally:
        running.communicate("")
    pruned = env_cache.prune(root, 0).splitlines()
    assert pruned == [f"removed the requirement set {first.name} (not used for 0 days): 0 MB",
                      "removed 2 wheels that no installed set uses, none used for 0 days",
                      f"freed 0 MB of requirement sets and wheels in {cache}"]
    assert [p for p in (cache / "requirement-sets").iterdir() if p.is_dir()] == []       # their lock files stay
    assert not list((cache / "wheels").iterdir()) and env_cache.list_text(root).splitlines()[1:] == []
