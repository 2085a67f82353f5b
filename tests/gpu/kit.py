"""The GPU check's kit: the wheels that the lent GPU machine's image lacks, for its Python 3.12 on manylinux
x86-64, fetched into build/gpu-kit/ (git-ignored), and the check that the set will install there.

    python -m tests.gpu.kit            # make gpu-kit: fetch what is missing, then check (exit 1: a problem)
    python -m tests.gpu.kit --check    # the check alone, on the kit as it is

What is fetched: the packages envs/gpu-kit.txt names, at the versions envs/requirements.txt and
envs/constraints.txt pin, then whatever their wheels require that neither the kit nor the image
(envs/gpu-image.txt, read off the device notes) already meets, pinned the same way (the newest release that
meets the requirement where the project pins none). A package published as a source distribution only
(DeepSpeed) is built here into a pure-Python wheel, its compiled ops left out (``DS_BUILD_OPS=0``): the GPU
machine builds the ops it loads.

The check (:func:`check`): one version of each package; every wheel installable on the image's Python and
platform; every requirement of every wheel (extras that another wheel asks for included, markers evaluated
for the image's Python) met by a wheel of the kit or by a package of the image at its recorded version; a
requirement on an image package whose version was not recorded is assumed met and listed as such; and the
repository's tracked and untracked-not-ignored files plus the kit within what one device call carries
(64 MiB). The kit's record (build/gpu-kit/kit.json) lists the wheels, those assumptions, and where the
image's version differs from the project's pin of a package the kit does not carry (torch): the GPU check
copies it into its results.
"""

from __future__ import annotations

import argparse
import email.parser
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
KIT_DIR = REPO / "build/gpu-kit"
RECORD = "kit.json"
IMAGE_FILE = REPO / "envs/gpu-image.txt"
ROOTS_FILE = REPO / "envs/gpu-kit.txt"
PIN_FILES = (REPO / "envs/requirements.txt", REPO / "envs/constraints.txt")
# What one device call carries: the working tree, carried paths included (the device notes' limits).
CARRY_LIMIT_BYTES = 64 * 2**20
# The image's interpreter and platform (envs/gpu-image.txt; x86-64 Linux with a glibc of manylinux_2_28).
PYTHON = (3, 12)
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
)
MARKERS = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "implementation_version": "3.12.3",
    "platform_python_implementation": "CPython",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "sys_platform": "linux",
    "os_name": "posix",
}
# Sdist-only packages are built here; DeepSpeed then leaves its C++/CUDA ops to be built where they load.
BUILD_ENV = {"DS_BUILD_OPS": "0"}


def read_listing(path: Path) -> dict[str, str | None]:
    """A file of ``NAME`` or ``NAME==VERSION`` lines (comments after ``#``): canonical name -> version or
    None."""
    listed: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            listed[canonicalize_name(name)] = version.strip() or None
    return listed


def project_pins(files: Iterable[Path] = PIN_FILES) -> dict[str, str]:
    """The project's pinned versions (envs/requirements.txt, then its resolved set), canonical names."""
    pins: dict[str, str] = {}
    for path in files:
        for name, version in read_listing(path).items():
            if version is not None:
                pins.setdefault(name, version)
    return pins


@dataclass(frozen=True)
class Wheel:
    name: str  # canonical
    version: Version
    requires: tuple[str, ...]  # Requires-Dist lines
    path: Path


def read_wheel(path: Path) -> Wheel:
    """A wheel's name, version and requirements, read from its METADATA."""
    with zipfile.ZipFile(path) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = email.parser.Parser().parsestr(archive.read(metadata).decode())
    return Wheel(
        canonicalize_name(message["Name"]),
        Version(message["Version"]),
        tuple(message.get_all("Requires-Dist") or ()),
        path,
    )


def target_tags() -> set[Tag]:
    """The wheel tags the image's CPython 3.12 on x86-64 Linux installs."""
    abi = f"cp{PYTHON[0]}{PYTHON[1]}"
    return {
        *cpython_tags(PYTHON, abis=[abi, "abi3", "none"], platforms=PLATFORMS),
        *compatible_tags(PYTHON, interpreter=abi, platforms=PLATFORMS),
    }


def installable(path: Path, tags: set[Tag] | None = None) -> bool:
    return bool(parse_wheel_filename(path.name)[3] & (tags or target_tags()))


def needs(wheel: Wheel, extras: Iterable[str] = ()) -> list[Requirement]:
    """What ``wheel`` requires on the image's Python, with the ``extras`` asked of it."""
    wanted = ("", *extras)
    found = []
    for line in wheel.requires:
        requirement = Requirement(line)
        marker = requirement.marker
        if marker is None or any(marker.evaluate({**MARKERS, "extra": extra}) for extra in wanted):
            found.append(requirement)
    return found


@dataclass
class Resolution:
    """The kit's requirements set against the kit and the image."""

    problems: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)  # met by an image package of unrecorded version
    unmet: dict[str, Requirement] = field(default_factory=dict)  # what the kit must carry besides


def requested_extras(wheels: dict[str, Wheel]) -> dict[str, set[str]]:
    """The extras each kit package is asked for by another (followed until nothing new is asked)."""
    extras: dict[str, set[str]] = {name: set() for name in wheels}
    changed = True
    while changed:
        changed = False
        for name, wheel in wheels.items():
            for requirement in needs(wheel, extras[name]):
                target = extras.setdefault(canonicalize_name(requirement.name), set())
                if not requirement.extras <= target:
                    target |= requirement.extras
                    changed = True
    return extras


def resolve(wheels: dict[str, Wheel], image: dict[str, str | None]) -> Resolution:
    """Each requirement of each kit wheel met by the kit (whose version must meet it), else by the image at
    its recorded version; one the image holds at an unrecorded version is assumed met; one neither meets is
    unmet (the kit must carry it: :func:`fetch_closure`)."""
    result = Resolution()
    extras = requested_extras(wheels)
    for name, wheel in sorted(wheels.items()):
        for requirement in needs(wheel, extras[name]):
            wanted = canonicalize_name(requirement.name)
            by = f"{wheel.name} {wheel.version} requires {requirement}"
            if wanted in wheels:
                have = wheels[wanted].version
                if not requirement.specifier.contains(have, prereleases=True):
                    result.problems.append(f"{by}: the kit carries {wanted} {have}")
            elif wanted in image and image[wanted] is None:
                result.assumed.append(f"{by}: the image's {wanted}, version not recorded")
            elif wanted in image and requirement.specifier.contains(image[wanted], prereleases=True):
                continue
            else:
                seen = f"the image holds {wanted} {image[wanted]}" if wanted in image else "nothing has it"
                result.unmet.setdefault(wanted, requirement)
                result.problems.append(f"{by}: {seen}")
    return result


def read_kit(kit: Path) -> tuple[dict[str, Wheel], list[str]]:
    """The kit's wheels by name, and the problems of the set itself: two versions of one package (the
    install refuses them), a wheel the image's Python cannot install."""
    wheels: dict[str, Wheel] = {}
    problems = []
    tags = target_tags()
    for path in sorted(kit.glob("*.whl")):
        wheel = read_wheel(path)
        if wheel.name in wheels:
            problems.append(f"{wheel.name}: two versions, {wheels[wheel.name].version} and {wheel.version}")
        if not installable(path, tags):
            problems.append(f"{path.name}: not installable on CPython 3.12, x86-64 Linux")
        wheels[wheel.name] = wheel
    return wheels, problems


def carried_bytes(repo: Path = REPO) -> int:
    """The bytes of the files a device call carries from ``repo`` without ``carry``: tracked, and untracked
    files git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    files = (repo / name for name in listed.decode().split("\0") if name)
    return sum(path.stat().st_size for path in files if path.is_file() and not path.is_symlink())


def kit_bytes(kit: Path) -> int:
    return sum(path.stat().st_size for path in kit.rglob("*") if path.is_file())


def differences(
    wheels: dict[str, Wheel], image: dict[str, str | None], pins: dict[str, str]
) -> dict[str, dict[str, str]]:
    """Each package the project pins and the image holds at another recorded version, the kit not carrying
    it: the image's version is the one the GPU check runs."""
    return {
        name: {"image": image[name] or "", "pinned": pin}
        for name, pin in sorted(pins.items())
        if name not in wheels and image.get(name) not in (None, pin)
    }


def stale_roots(wheels: dict[str, Wheel], roots: Iterable[str], pins: dict[str, str]) -> list[str]:
    """The kit's packages named in envs/gpu-kit.txt at another version than the project's pin (a pin moved
    since the kit was fetched)."""
    return [
        name
        for name in roots
        if name in wheels and name in pins and wheels[name].version != Version(pins[name])
    ]


def check(
    kit: Path, image: dict[str, str | None], tree_bytes: int, pins: dict[str, str], roots: Iterable[str] = ()
) -> dict:
    """The kit's record: its wheels, the size against the limit, the assumptions, the differences from the
    project's pins, and the problems (none: the kit installs on the image, carries the pinned versions of
    ``roots`` and fits one call)."""
    wheels, problems = read_kit(kit)
    for name in stale_roots(wheels, roots, pins):
        carried = wheels[name].version
        problems.append(
            f"{name}: the kit carries {carried}, the project pins {pins[name]} (make gpu-kit fetches it)"
        )
    resolution = resolve(wheels, image)
    total = tree_bytes + kit_bytes(kit)
    if total > CARRY_LIMIT_BYTES:
        problems.append(
            f"the tree ({tree_bytes / 2**20:.1f} MiB) and the kit ({(total - tree_bytes) / 2**20:.1f} MiB) "
            f"exceed the {CARRY_LIMIT_BYTES / 2**20:.0f} MiB one device call carries"
        )
    if not wheels:
        problems.append(f"{kit}: no wheels (make gpu-kit fetches them)")
    return {
        "wheels": {
            name: {"version": str(w.version), "file": w.path.name} for name, w in sorted(wheels.items())
        },
        "tree_bytes": tree_bytes,
        "kit_bytes": total - tree_bytes,
        "limit_bytes": CARRY_LIMIT_BYTES,
        "assumed": resolution.assumed,
        "image_differs_from_pin": differences(wheels, image, pins),
        "problems": problems + resolution.problems,
    }


# --- fetching ----------------------------------------------------------------------------------------------

Fetch = Callable[[list[str], Path], None]


def requirement_to_fetch(name: str, requirement: Requirement | None, pins: dict[str, str]) -> str:
    """What to ask the index for: the project's pin where it meets ``requirement``, else the requirement
    itself (pip takes the newest release that meets it)."""
    pin = pins.get(name)
    if pin is not None and (requirement is None or requirement.specifier.contains(pin, prereleases=True)):
        return f"{name}=={pin}"
    specifier = "" if requirement is None else str(requirement.specifier)
    return f"{name}{specifier}"


def fetch_closure(
    roots: Iterable[str], kit: Path, image: dict[str, str | None], pins: dict[str, str], fetch: Fetch
) -> None:
    """Fetch ``roots`` into ``kit`` (those not there yet), then, round by round, what the kit's wheels
    require that neither the kit nor the image meets; each package is asked for once."""
    kit.mkdir(parents=True, exist_ok=True)
    wheels, _ = read_kit(kit)
    for name in stale_roots(wheels, roots, pins):  # a pin moved: its old wheel goes
        wheels.pop(name).path.unlink()
    wanted = {name: None for name in roots if name not in wheels}
    asked: set[str] = set()
    while wanted:
        fetch([requirement_to_fetch(name, requirement, pins) for name, requirement in wanted.items()], kit)
        asked |= set(wanted)
        wheels, _ = read_kit(kit)
        unmet = resolve(wheels, image).unmet
        wanted = {n: r for n, r in unmet.items() if n not in wheels and n not in asked}


def pip_fetch(specs: list[str], kit: Path) -> None:
    """Download each spec's wheel for the image's Python and platform; a spec with no such wheel (a source
    distribution only) is built here, without build isolation, into a wheel."""
    download = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        ".".join(map(str, PYTHON)),
        "--implementation",
        "cp",
        *[flag for platform in PLATFORMS for flag in ("--platform", platform)],
        "--dest",
        str(kit),
    ]
    if subprocess.run([*download, *specs]).returncode == 0:
        return
    for spec in specs:  # one at a time: which ones have no wheel
        if subprocess.run([*download, spec], capture_output=True).returncode == 0:
            continue
        print(f"gpu-kit: no wheel of {spec} for CPython 3.12: building one here", file=sys.stderr)
        build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
        subprocess.run(
            [*build, "--no-cache-dir", "--wheel-dir", str(kit), spec],
            env={**os.environ, **BUILD_ENV},
            check=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kit", type=Path, default=KIT_DIR)
    parser.add_argument("--check", action="store_true", help="check the kit as it is, fetch nothing")
    args = parser.parse_args(argv)
    image, pins, roots = read_listing(IMAGE_FILE), project_pins(), list(read_listing(ROOTS_FILE))
    if not args.check:
        fetch_closure(roots, args.kit, image, pins, pip_fetch)
    record = check(args.kit, image, carried_bytes(), pins, roots)
    (args.kit / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    print(
        f"gpu-kit: {len(record['wheels'])} wheels, {record['kit_bytes'] / 2**20:.1f} MiB with a "
        f"{record['tree_bytes'] / 2**20:.1f} MiB tree (limit {CARRY_LIMIT_BYTES / 2**20:.0f} MiB); "
        f"{len(record['assumed'])} requirements assumed met by the image; record: {args.kit / RECORD}"
    )
    for name, versions in record["image_differs_from_pin"].items():
        image_version, pinned = versions["image"], versions["pinned"]
        print(f"gpu-kit: the GPU check runs the image's {name} {image_version} (pinned {pinned})")
    for problem in record["problems"]:
        print(f"gpu-kit: problem: {problem}")
    return 1 if record["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
