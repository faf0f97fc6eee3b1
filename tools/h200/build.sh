#!/usr/bin/env bash
# Builds eerl on the lent GPU machine (Release, no tests) into build-dev/, using jansson from the
# Debian packages unpacked out of .devcarry/ when the machine has none. Sourced by the other
# scripts here: it leaves LD_LIBRARY_PATH pointing at that jansson and sets EERL_LIBRARY.
#   . tools/h200/build.sh LOGFILE
_log=${1:-/dev/null}
if [ -d .devcarry ] && ls .devcarry/*.deb >/dev/null 2>&1; then
    mkdir -p .devcarry/root
    for f in .devcarry/*.deb; do dpkg -x "$f" .devcarry/root; done
    _prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devcarry/root/usr" -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON)
    export LD_LIBRARY_PATH="$PWD/.devcarry/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
    _prefix=()
fi
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DEERL_BUILD_TESTS=OFF \
    -DEERL_BUILD_PROGRAMS=OFF "${_prefix[@]}" >"$_log" 2>&1
cmake --build build-dev -j 8 >>"$_log" 2>&1
export EERL_LIBRARY="$PWD/build-dev/libeerl.so"
