# Sourced by the scripts that run a suite inside an engine's own venv (test-lmcache.sh,
# test-sglang.sh, test-vllm.sh, test-vllm-tier.sh): the steps each takes before installing its
# engine, written once. Each expects the repository root as the working directory and $PYTHON.

# The project's own setup (Debian's redis-server, Rust, the dev venv) where it has not run yet,
# and cargo on the PATH.
ensure_project_setup() {
    if ! command -v redis-server >/dev/null 2>&1 || ! { command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ]; }; then
        scripts/setup.sh
    fi
    export PATH="$HOME/.cargo/bin:$PATH"
}

# require_python MIN MAX WHY: fails unless $PYTHON is 3.MIN to 3.MAX (MAX empty: no upper bound),
# saying "needs Python <range> (WHY), got <version>".
require_python() {
    "$PYTHON" - "$1" "$2" "$3" <<'PY'
import sys
low, high, why = int(sys.argv[1]), sys.argv[2], sys.argv[3]
minor = sys.version_info[:2]
wanted = f"3.{low}-3.{high}" if high else f"3.{low}+"
if minor < (3, low) or (high and minor > (3, int(high))):
    sys.exit(f"needs Python {wanted} ({why}), got {sys.version.split()[0]}")
PY
}

# make_venv VENV: creates the venv where it is missing and brings its pip up to date; sets PIP to
# the command that runs that pip.
make_venv() {
    if [ ! -x "$1/bin/python" ]; then
        echo "==> creating $1"
        "$PYTHON" -m venv "$1"
    fi
    PIP=("$1/bin/python" -m pip)
    "${PIP[@]}" install -q --upgrade pip
}

# installed VENV NAME VERSION: whether VENV has exactly that version of NAME.
installed() {
    "$1/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$2') != '$3')" 2>/dev/null
}
