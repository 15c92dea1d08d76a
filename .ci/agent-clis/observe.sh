#!/usr/bin/env bash
# Runs the installed real agent CLIs headless, exactly as a modix preset would,
# in failure scenarios that need no model (no key; a fake key against a closed
# local port), and writes what they did to tests/fixtures/agent-clis/<scenario>/:
#   cmd.txt     the command line and the environment given (nothing else leaks in: env -i)
#   meta.txt    exit code, wall time, stream sizes, processes left behind
#   stdout.txt  stdout (trimmed when long: head and tail, with a marker line)
#   stderr.txt  stderr (same)
#   timeline.txt stdout and stderr lines merged, each with its time since start ("+12.34 out|err …"),
#               for retry and keep-alive periods (JavaScript stack frames left out)
#   files.txt   every file the CLI left in its scratch HOME and TMPDIR, with mode and size,
#               and which of them hold the fake key or the prompt
# docs/agent-clis-observed.md is written from these. Re-run after bumping a CLI:
#   .ci/agent-clis/install.sh && .ci/agent-clis/observe.sh [SCENARIO...]
#
# Safety: no real key exists or is used. "Fake key" scenarios point the CLI's
# base URL at a closed port on 127.0.0.1, so the fake key never leaves the
# machine. "No key" scenarios keep the default endpoints (as a user would);
# with no model network those fail at name resolution.
# Every run is bounded by `timeout` (which signals its whole process group);
# afterwards any process still carrying the run's marker variable is killed
# by pid and reported in meta.txt.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin="$here/node_modules/.bin"
out_root="$repo/tests/fixtures/agent-clis"
[ -x "$bin/claude" ] || { echo "run $here/install.sh first" >&2; exit 1; }

# A port nothing listens on: bind an ephemeral one, then close it.
closed_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
closed="http://127.0.0.1:$closed_port"
fake_anthropic="sk-ant-api03-FAKE-modix-observe-0000000000"
fake_openai="sk-proj-FAKE-modix-observe-0000000000"
fake_gemini="AIzaFAKE-modix-observe-0000000000"
prompt="Reply with the single word PONG. (modix-observe-prompt-marker)"
node_dir=$(dirname "$(command -v node)")
# Gemini takes GOOGLE_GEMINI_BASE_URL alone as "gateway" auth, refused headless; settings pick key auth.
gemini_key_auth='{"security":{"auth":{"selectedType":"gemini-api-key"}}}'


claude_args=(-p --output-format stream-json --verbose --model sonnet --permission-mode plan --no-session-persistence)
codex_args=(exec --json --skip-git-repo-check -C WORK -m gpt-5-codex -s read-only --ephemeral -)
gemini_stream=(-o stream-json -m gemini-2.5-flash --skip-trust --approval-mode plan)
gemini_json=(-o json -m gemini-2.5-flash --skip-trust --approval-mode plan)

# Runs ARGS with PROMPT on stdin; writes DIR/stdout.txt, DIR/stderr.txt and a merged,
# time-stamped DIR/timeline.txt; exits with the command's exit code.
stamp_py='
import subprocess, sys, threading, time
d, prompt, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
t0 = time.monotonic()
lock = threading.Lock()
tl = open(d + "/timeline.txt", "wb")
p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
def pump(src, name):
    with open(d + "/" + name + ".txt", "wb") as raw:
        for line in iter(src.readline, b""):
            raw.write(line)
            # Stack frames ("    at …") stay in stderr.txt only: the timeline is for timing.
            if line.startswith(b"    at "):
                continue
            with lock:
                tl.write(b"+%7.2f %s " % (time.monotonic() - t0, name[3:].encode()) + line)
                tl.flush()
ts = [threading.Thread(target=pump, args=(p.stdout, "stdout")), threading.Thread(target=pump, args=(p.stderr, "stderr"))]
for t in ts: t.start()
try:
    p.stdin.write(prompt.encode() + b"\n"); p.stdin.close()
except BrokenPipeError:
    pass
code = p.wait()
for t in ts: t.join(10)
sys.exit(code)
'

# Keeps a capture small: first 40 and last 15 lines when longer than 60.
trim() {
  local f=$1 n
  n=$(wc -l <"$f")
  if [ "$n" -gt 60 ]; then
    { head -n 40 "$f"; echo "[observe.sh: $((n - 55)) of $n lines trimmed here]"; tail -n 15 "$f"; } >"$f.t"
    mv "$f.t" "$f"
  fi
}

# run NAME TIMEOUT_S "VAR=value ..." CLI ARGS...   (prompt on stdin; WORK in ARGS = scratch work dir)
run() {
  local name=$1 limit=$2 envs=$3 cli=$4
  shift 4
  local base dir args=() a start end code mark pids
  base=$(mktemp -d /var/tmp/modix-observe.XXXXXX)
  mkdir -p "$base/home" "$base/tmp" "$base/work"
  printf 'def mean(xs):\n    return sum(xs) / (len(xs) - 1)\n' >"$base/work/calc.py"
  # Seeds Gemini's user settings (auth type, retry bound) when asked.
  if [ -n "${GEMINI_SETTINGS:-}" ]; then
    mkdir -p "$base/home/.gemini"
    echo "$GEMINI_SETTINGS" >"$base/home/.gemini/settings.json"
    echo "# seeded <scratch>/home/.gemini/settings.json: $(cat "$base/home/.gemini/settings.json")" >"$out_root/$name.seed"
  fi
  for a in "$@"; do args+=("${a//WORK/$base/work}"); done
  dir="$out_root/$name"
  rm -rf "$dir" && mkdir -p "$dir"
  [ -f "$out_root/$name.seed" ] && mv "$out_root/$name.seed" "$dir/seed.txt"
  mark="modix-observe-$name-$$"
  # shellcheck disable=SC2086  # $envs is a list of VAR=value words on purpose
  set -- env -i PATH="$bin:$node_dir:/usr/local/bin:/usr/bin:/bin" HOME="$base/home" \
    TMPDIR="$base/tmp" LANG=C.UTF-8 MODIX_OBSERVE_MARK="$mark" $envs "$bin/$cli" "${args[@]}"
  {
    echo "# scenario: $name (timeout ${limit}s; prompt on stdin: \"$prompt\")"
    echo "# env -i, then:"
    echo "PATH=<CLIs>:<node>:/usr/local/bin:/usr/bin:/bin HOME=<scratch>/home TMPDIR=<scratch>/tmp LANG=C.UTF-8 $envs"
    echo "$cli ${args[*]//$base/<scratch>}"
  } >"$dir/cmd.txt"
  start=$(date +%s.%N)
  (cd "$base/work" && python3 -c "$stamp_py" "$dir" "$prompt" timeout -k 5 "$limit" "$@")
  code=$?
  end=$(date +%s.%N)
  # Anything still alive with our marker escaped timeout's process group.
  pids=$(grep -lsz "MODIX_OBSERVE_MARK=$mark" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | tr '\n' ' ')
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  sed -i "s#$base#<scratch>#g; s#$here#<agent-clis>#g" "$dir/stdout.txt" "$dir/stderr.txt" "$dir/timeline.txt"
  {
    echo "exit_code: $code$([ "$code" = 124 ] && echo ' (killed by timeout after '"$limit"'s)')"
    printf 'wall_seconds: %.1f\n' "$(echo "$end - $start" | bc)"
    echo "stdout_lines: $(wc -l <"$dir/stdout.txt")"
    echo "stderr_lines: $(wc -l <"$dir/stderr.txt")"
    echo "left_running_after_timeout_group_kill: ${pids:-none}"
  } >"$dir/meta.txt"
  {
    echo "# files left in <scratch>/home and <scratch>/tmp (mode size path)"
    (cd "$base" && find home tmp work -type f -not -path 'home/.codex/skills/.system/*' -printf '%m %s %p\n' | sort -k3)
    [ -d "$base/home/.codex/skills/.system" ] &&
      echo "(and $(find "$base/home/.codex/skills/.system" -type f | wc -l) files under home/.codex/skills/.system/: Codex's bundled skills, not listed)"
    echo "# files holding a fake key:"
    (cd "$base" && grep -rlsF -e "$fake_anthropic" -e "$fake_openai" -e "$fake_gemini" home tmp) || echo "(none)"
    echo "# files holding the prompt:"
    (cd "$base" && grep -rlsF "modix-observe-prompt-marker" home tmp) || echo "(none)"
  } >"$dir/files.txt"
  # Keep a copy of notable leftovers (shell snapshots, error reports), trimmed.
  find "$base/home/.codex/shell_snapshots" "$base/tmp" -maxdepth 3 -type f \( -name '*.sh' -o -name '*.json' \) 2>/dev/null |
    head -n 2 | while read -r f; do
      cp "$f" "$dir/leftover-$(basename "$f")"
      sed -i "s#$base#<scratch>#g; s#$here#<agent-clis>#g" "$dir/leftover-$(basename "$f")"
      trim "$dir/leftover-$(basename "$f")"
    done
  trim "$dir/stdout.txt"
  trim "$dir/stderr.txt"
  trim "$dir/timeline.txt"
  rm -rf "$base"
  echo "$name: exit $code in $(sed -n 's/wall_seconds: //p' "$dir/meta.txt")s"
}

scenario() {
  case $1 in
  claude-version) run "$1" 30 "" claude --version ;;
  claude-auth-status) run "$1" 30 "" claude auth status ;;
  claude-auth-status-text) run "$1" 30 "" claude auth status --text ;;
  claude-auth-status-fakekey) run "$1" 30 "ANTHROPIC_API_KEY=$fake_anthropic" claude auth status ;;
  claude-nokey) run "$1" 60 "" claude "${claude_args[@]}" ;;
  claude-fakekey-closedport) run "$1" 240 "ANTHROPIC_API_KEY=$fake_anthropic ANTHROPIC_BASE_URL=$closed" claude "${claude_args[@]}" ;;
  claude-fakekey-closedport-retries0) run "$1" 60 "ANTHROPIC_API_KEY=$fake_anthropic ANTHROPIC_BASE_URL=$closed CLAUDE_CODE_MAX_RETRIES=0" claude "${claude_args[@]}" ;;
  codex-version) run "$1" 30 "" codex --version ;;
  codex-login-status) run "$1" 30 "" codex login status ;;
  codex-login-status-fakekey) run "$1" 30 "OPENAI_API_KEY=$fake_openai" codex login status ;;
  codex-login-status-codexkey) run "$1" 30 "CODEX_API_KEY=$fake_openai" codex login status ;;
  codex-nokey) run "$1" 150 "" codex "${codex_args[@]}" ;;
  # Long enough to see whether the gap between "waiting for network" lines stops growing.
  codex-nokey-long) run "$1" 420 "" codex "${codex_args[0]}" --disable shell_snapshot "${codex_args[@]:1}" ;;
  codex-nokey-nosnapshot) run "$1" 150 "" codex "${codex_args[0]}" --disable shell_snapshot "${codex_args[@]:1}" ;;
  # Codex 0.169 ignores OPENAI_BASE_URL (first scenario shows it); the config key openai_base_url works.
  codex-fakekey-envbaseurl) run "$1" 30 "OPENAI_API_KEY=$fake_openai OPENAI_BASE_URL=$closed/v1" codex "${codex_args[@]}" ;;
  codex-fakekey-closedport) run "$1" 150 "OPENAI_API_KEY=$fake_openai" codex "${codex_args[0]}" -c "openai_base_url=\"$closed/v1\"" "${codex_args[@]:1}" ;;
  codex-fakekey-closedport-nosnapshot) run "$1" 150 "OPENAI_API_KEY=$fake_openai" codex "${codex_args[0]}" --disable shell_snapshot -c "openai_base_url=\"$closed/v1\"" "${codex_args[@]:1}" ;;
  gemini-version) run "$1" 30 "" gemini --version ;;
  gemini-nokey-stream) run "$1" 60 "" gemini "${gemini_stream[@]}" ;;
  gemini-nokey-json) run "$1" 60 "" gemini "${gemini_json[@]}" ;;
  gemini-fakekey-baseurl-stream) run "$1" 60 "GEMINI_API_KEY=$fake_gemini GOOGLE_GEMINI_BASE_URL=$closed" gemini "${gemini_stream[@]}" ;;
  gemini-fakekey-baseurl-json) run "$1" 60 "GEMINI_API_KEY=$fake_gemini GOOGLE_GEMINI_BASE_URL=$closed" gemini "${gemini_json[@]}" ;;
  gemini-fakekey-closedport-stream) GEMINI_SETTINGS=$gemini_key_auth run "$1" 300 "GEMINI_API_KEY=$fake_gemini GOOGLE_GEMINI_BASE_URL=$closed" gemini "${gemini_stream[@]}" ;;
  gemini-fakekey-closedport-json) GEMINI_SETTINGS=$gemini_key_auth run "$1" 300 "GEMINI_API_KEY=$fake_gemini GOOGLE_GEMINI_BASE_URL=$closed" gemini "${gemini_json[@]}" ;;
  # settings general.maxAttempts bounds Gemini's retries (as CLAUDE_CODE_MAX_RETRIES does Claude's).
  gemini-fakekey-closedport-maxattempts1) GEMINI_SETTINGS='{"security":{"auth":{"selectedType":"gemini-api-key"}},"general":{"maxAttempts":1}}' run "$1" 120 "GEMINI_API_KEY=$fake_gemini GOOGLE_GEMINI_BASE_URL=$closed" gemini "${gemini_stream[@]}" ;;
  *) echo "unknown scenario $1" >&2; return 1 ;;
  esac
}

all=(claude-version claude-auth-status claude-auth-status-text claude-auth-status-fakekey claude-nokey
  claude-fakekey-closedport claude-fakekey-closedport-retries0
  codex-version codex-login-status codex-login-status-fakekey codex-login-status-codexkey codex-nokey codex-nokey-nosnapshot
  codex-fakekey-envbaseurl codex-fakekey-closedport codex-fakekey-closedport-nosnapshot
  gemini-version gemini-nokey-stream gemini-nokey-json gemini-fakekey-baseurl-stream gemini-fakekey-baseurl-json gemini-fakekey-closedport-stream gemini-fakekey-closedport-json gemini-fakekey-closedport-maxattempts1)
[ $# -gt 0 ] || set -- "${all[@]}"
for s in "$@"; do scenario "$s"; done
