"""Java artifacts from Maven Central, resolved once and cached, for tests and benchmarks.

Maven keeps the jars in ~/.m2; this module keeps, under `.cache/maven/` in the checkout,
the classpath each request resolved to (and the classes a Maven project compiled to), keyed
by what was asked, so a second test run starts no Maven at all. A resolution that fails
(no network, an artifact not served) raises `MavenUnavailable` with Maven's own error lines:
tests that need Java artifacts fail with it rather than skip.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import shutil
import subprocess

REPO = pathlib.Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "maven"
RESOLVE_TIMEOUT_S = 900

# Pinned versions: the newest 4.x of Kafka served here, one 3.x for older request versions,
# and Spark's Kafka connector nearest to the project's pyspark (4.3.0 is not served; 4.2.0 is).
KAFKA_VERSION = "4.4.0"
KAFKA_3_VERSION = "3.9.2"
SPARK_KAFKA_CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"


class MavenUnavailable(RuntimeError):
    """Maven could not produce what was asked; the message carries Maven's reason."""


def _mvn() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenUnavailable("`mvn` is not on PATH: install Maven (Java 17 and Maven are "
                               "expected on the machine; .ci/run relies on them)")
    return mvn


def _run_maven(args: list[str], cwd: pathlib.Path, what: str) -> None:
    try:
        done = subprocess.run([_mvn(), "-B", "-q", *args], cwd=cwd, capture_output=True,
                              text=True, timeout=RESOLVE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise MavenUnavailable(f"Maven took over {RESOLVE_TIMEOUT_S}s to {what}") from None
    if done.returncode != 0:
        output = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)
        lines = [line.split(" -> [Help")[0] for line in output.splitlines()
                 if line.startswith("[ERROR] ") and line[8:].strip() and "-X switch" not in line and "-e switch" not in line
                 and "possible solutions" not in line and "[Help " not in line[:20]][:3]
        reason = "\n".join(lines) or output[-2000:]
        raise MavenUnavailable(f"Maven could not {what} (is Maven Central reachable?):\n{reason}")


def _pom(coordinates: list[str]) -> str:
    deps = []
    for coordinate in coordinates:
        group, artifact, version = coordinate.split(":")
        deps.append(f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                    f"<version>{version}</version></dependency>")
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0</modelVersion>"
            "<groupId>sluice.tests</groupId><artifactId>resolve</artifactId><version>1</version>"
            f"<dependencies>{''.join(deps)}</dependencies></project>\n")


def classpath(coordinates: list[str]) -> list[pathlib.Path]:
    """The runtime classpath of `group:artifact:version` coordinates, their dependencies included."""
    key = hashlib.sha256("\n".join(sorted(coordinates)).encode()).hexdigest()[:16]
    work = CACHE / f"resolve-{key}"
    listing = work / "classpath.txt"
    if not listing.exists():
        work.mkdir(parents=True, exist_ok=True)
        (work / "pom.xml").write_text(_pom(coordinates))
        partial = work / "classpath.txt.partial"
        _run_maven(["dependency:build-classpath", "-Dmdep.includeScope=runtime",
                    f"-Dmdep.outputFile={partial}"], work, f"resolve {', '.join(coordinates)}")
        os.replace(partial, listing)
    return [pathlib.Path(entry) for entry in listing.read_text().strip().split(os.pathsep) if entry]


def build_project(project: pathlib.Path, properties: dict[str, str]) -> list[pathlib.Path]:
    """Compile the Maven project at `project` with `-Dkey=value` properties; returns the
    classpath to run it: its compiled classes first, then its runtime dependencies.

    The build is cached by the project's pom, its sources and the properties."""
    digest = hashlib.sha256()
    for path in sorted(p for p in project.rglob("*") if p.is_file() and "target" not in p.parts):
        digest.update(str(path.relative_to(project)).encode() + b"\0" + path.read_bytes())
    for key, value in sorted(properties.items()):
        digest.update(f"{key}={value}".encode())
    out = CACHE / f"build-{project.name}-{digest.hexdigest()[:16]}"
    listing = out / "classpath.txt"
    if not listing.exists():
        out.mkdir(parents=True, exist_ok=True)
        partial = out / "classpath.txt.partial"
        _run_maven(["-f", str(project / "pom.xml"), f"-Dbuild.dir={out / 'target'}",
                    *(f"-D{key}={value}" for key, value in properties.items()),
                    "compile", "dependency:build-classpath", "-Dmdep.includeScope=runtime",
                    f"-Dmdep.outputFile={partial}"], project, f"build {project.name}")
        os.replace(partial, listing)
    entries = [out / "target" / "classes"]
    entries += [pathlib.Path(e) for e in listing.read_text().strip().split(os.pathsep) if e]
    return entries


def java_command(entries: list[pathlib.Path], main_class: str, *args: str,
                 heap: str = "256m", quick_start: bool = True) -> list[str]:
    """A `java` command line running `main_class` on `entries`. `quick_start` trades peak
    speed for start-up time (C1 only, serial GC): right for short-lived test clients, wrong
    for anything measured."""
    java = shutil.which("java")
    if java is None:
        raise MavenUnavailable("`java` is not on PATH: Java 17 is expected on the machine")
    tuning = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"] if quick_start else []
    return [java, f"-Xmx{heap}", *tuning,
            "-cp", os.pathsep.join(str(e) for e in entries), main_class, *args]


if __name__ == "__main__":  # python -m sluice.maven GROUP:ARTIFACT:VERSION...: print the classpath
    import sys

    try:
        print(os.pathsep.join(str(entry) for entry in classpath(sys.argv[1:])))
    except MavenUnavailable as exc:
        sys.exit(f"sluice.maven: {exc}")
