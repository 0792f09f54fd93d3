"""The small programs the SSH executor runs on the host (passed on the command line, never installed).

Each is POSIX sh or stdlib-only Python, so the host needs nothing but sshd, a Python and kstui.
"""

# argv: python-or-venv ("" = find it), probe program, cache dir ("" = default).
# Resolves the interpreter (a venv directory means its bin/python; none given means the interpreter
# of `kstui` on PATH, else python3) and runs the probe with it.
PROBE_SH = r"""
py=$1
if [ -z "$py" ]; then
  k=$(command -v kstui 2>/dev/null) && py=$(sed -n '1s/^#![[:space:]]*//p' "$k")
  case $py in "/usr/bin/env "*) py=${py#/usr/bin/env }; esac
  [ -n "$py" ] || py=python3
fi
[ -d "$py" ] && py=$py/bin/python
command -v "$py" >/dev/null 2>&1 || { echo "kstui-remote: no Python at $py" >&2; exit 96; }
exec "$py" -c "$2" "$py" "$3"
"""

# argv: the interpreter path as resolved above, cache dir. Prints one marked JSON line, so a chatty
# login shell cannot be mistaken for it.
PROBE_PY = r"""
import json, os, socket, sys
out = {"python": sys.argv[1], "hostname": socket.gethostname()}
cache = sys.argv[2] or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kstui", "remote")
try:
    import harness.result as r
except ImportError as exc:
    out["missing"] = str(exc)
else:
    out["schema"] = getattr(r, "SCHEMA_VERSION", None)
    try:
        import kstui
        out["kstui"] = getattr(kstui, "__version__", None)
    except ImportError:
        out["kstui"] = None
os.makedirs(os.path.join(cache, "objects"), exist_ok=True)
out["cache"] = os.path.abspath(cache)
print("kstui-probe " + json.dumps(out))
"""

# argv: objects dir, sha256…  Prints the ones the host lacks.
HAVE_SH = r'd=$1; shift; for h; do [ -e "$d/$h" ] || echo "$h"; done'

# argv: objects dir, sha256; stdin: the content. Written beside and renamed, so a reader never sees
# half a file.
SEND_SH = r'd=$1; t="$d/.in.$$"; mkdir -p "$d" && cat > "$t" && mv -f "$t" "$d/$2"'

MISSING_EXIT = 97  # an object vanished from the host's cache: send again and retry
REFUSED_EXIT = 98  # no usable GPU: absent, not the one asked for, or busy

# argv: python, cache dir, kernel name, kernel sha, task sha ("" = none), check GPU ("1"/"0"),
# devices ("" = GPU 0), then the harness arguments after `eval FILE`.
# Lays the kernel and its task file out under their own names, refuses a missing or busy GPU, runs
# the harness, and kills it when our side of the connection goes away (stdin reaches EOF).
DRIVER_PY = r"""
import os, shutil, signal, subprocess, sys, threading
py, cache, name, ksha, tsha, check_gpu, devices, *rest = sys.argv[1:]

def refuse(code, message):
    print("kstui-remote: " + message, file=sys.stderr)
    sys.exit(code)

objects = os.path.join(cache, "objects")
missing = [h for h in (ksha, tsha) if h and not os.path.exists(os.path.join(objects, h))]
if missing:
    refuse(97, "missing " + " ".join(missing))
work = os.path.join(cache, "work", ksha[:20] + "-" + (tsha[:20] or "none"))
os.makedirs(work, exist_ok=True)
for sha, fname in ((ksha, name), (tsha, os.path.splitext(name)[0] + ".toml")):
    dst = os.path.join(work, fname)
    if sha and not os.path.exists(dst):
        tmp = "%s.%d" % (dst, os.getpid())
        shutil.copyfile(os.path.join(objects, sha), tmp)
        os.replace(tmp, dst)

def smi(*args):
    try:
        p = subprocess.run([nvsmi, *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        refuse(98, "no usable NVIDIA GPU: nvidia-smi failed (%s)" % exc)
    lines = [l.strip() for l in (p.stdout + p.stderr).splitlines() if l.strip()]
    if p.returncode != 0:
        refuse(98, "no usable NVIDIA GPU: " + (lines[-1] if lines else "nvidia-smi exit %d" % p.returncode))
    return [[f.strip() for f in l.split(",")] for l in p.stdout.splitlines() if l.strip()]

if check_gpu == "1":
    nvsmi = shutil.which("nvidia-smi")
    if not nvsmi:
        refuse(98, "no NVIDIA GPU: nvidia-smi is not installed on this host")
    gpus = {int(r[0]): (r[1], r[2]) for r in smi("--query-gpu=index,uuid,name", "--format=csv,noheader") if len(r) >= 3}
    if not gpus:
        refuse(98, "no NVIDIA GPU on this host")
    want = [int(d) for d in devices.split(",")] if devices else [0]
    for d in want:
        if d not in gpus:
            refuse(98, "no GPU %d on this host (it has %s)" % (d, ", ".join(map(str, sorted(gpus)))))
    owner = {gpus[d][0]: d for d in want}
    for r in smi("--query-compute-apps=gpu_uuid,pid,process_name", "--format=csv,noheader"):
        if len(r) >= 3 and r[0] in owner:
            d = owner[r[0]]
            refuse(98, "GPU %d (%s) is busy: pid %s (%s) runs on it, so timings would be wrong"
                   % (d, gpus[d][1], r[1], r[2]))

child = subprocess.Popen([py, "-m", "harness", "eval", os.path.join(work, name), *rest],
                         cwd=work, stdin=subprocess.DEVNULL, start_new_session=True)
finished = threading.Event()

def watch():
    try:
        while os.read(0, 1 << 16):  # raw reads: a buffered stdin would block interpreter shutdown
            pass
    except OSError:
        pass
    if not finished.is_set():
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            pass

threading.Thread(target=watch, daemon=True).start()
code = child.wait()
finished.set()
if code < 0 or code == 255:  # 255 is ssh's own failure status; a signal has no status at all
    print("kstui-remote: the harness %s" % ("was killed by signal %d" % -code if code < 0 else "exited with status 255"),
          file=sys.stderr, flush=True)
    code = 125
os._exit(code)  # the watcher thread still blocks in read(); nothing else is left to clean up
"""
