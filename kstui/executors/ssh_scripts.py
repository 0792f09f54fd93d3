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

# The agent: one long-lived process per executor on the host, reached over one multiplexed ssh
# session, so an evaluation pays neither a login shell nor an interpreter start-up beyond the
# harness's own. argv: python (for the harness), cache dir.
# Protocol, one JSON object per line. In: {"id", "kernel", "files": {name: sha256}, "work", "check_gpu",
# "devices", "args"} to evaluate (each file laid out under cache/work/<work>/ by its name; the kernel
# is one of them), {"cancel": id} to kill one. Out: {"ready": true, "pid"} once, then
# {"id", "rc", "stdout", "stderr"} per evaluation. When stdin reaches EOF (our side went away) every
# harness still running is killed and the agent exits.
AGENT_PY = r"""
import json, os, shutil, signal, subprocess, sys, threading
py, cache = sys.argv[1:3]
objects = os.path.join(cache, "objects")
lock = threading.Lock()
running = {}
cancelled = set()

class Refused(Exception):
    def __init__(self, code, message):
        self.code, self.message = code, message

def reply(msg):
    data = (json.dumps(msg) + "\n").encode()
    with lock:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

def lay_out(files, work):
    missing = [h for h in files.values() if not os.path.exists(os.path.join(objects, h))]
    if missing:
        raise Refused(97, "missing " + " ".join(missing))
    if not work or any(c not in "0123456789abcdef" for c in work):
        raise Refused(125, "refused to lay out in %r: not a digest" % work)
    work = os.path.join(cache, "work", work)
    for name, sha in files.items():
        parts = name.split("/")
        if not name or name.startswith("/") or ".." in parts or "\\" in name:
            raise Refused(125, "refused to lay out %r: outside the work folder" % name)
        dst = os.path.join(work, *parts)
        if not os.path.exists(dst):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            tmp = "%s.%d.%d" % (dst, os.getpid(), threading.get_ident())
            shutil.copyfile(os.path.join(objects, sha), tmp)
            os.replace(tmp, dst)
    return work

def smi(nvsmi, *args):
    try:
        p = subprocess.run([nvsmi, *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Refused(98, "no usable NVIDIA GPU: nvidia-smi failed (%s)" % exc)
    lines = [l.strip() for l in (p.stdout + p.stderr).splitlines() if l.strip()]
    if p.returncode != 0:
        raise Refused(98, "no usable NVIDIA GPU: " + (lines[-1] if lines else "nvidia-smi exit %d" % p.returncode))
    return [[f.strip() for f in l.split(",")] for l in p.stdout.splitlines() if l.strip()]

def check_gpus(devices):
    nvsmi = shutil.which("nvidia-smi")
    if not nvsmi:
        raise Refused(98, "no NVIDIA GPU: nvidia-smi is not installed on this host")
    gpus = {int(r[0]): (r[1], r[2]) for r in smi(nvsmi, "--query-gpu=index,uuid,name", "--format=csv,noheader") if len(r) >= 3}
    if not gpus:
        raise Refused(98, "no NVIDIA GPU on this host")
    want = devices or [0]
    for d in want:
        if d not in gpus:
            raise Refused(98, "no GPU %d on this host (it has %s)" % (d, ", ".join(map(str, sorted(gpus)))))
    owner = {gpus[d][0]: d for d in want}
    for r in smi(nvsmi, "--query-compute-apps=gpu_uuid,pid,process_name", "--format=csv,noheader"):
        if len(r) >= 3 and r[0] in owner:
            d = owner[r[0]]
            raise Refused(98, "GPU %d (%s) is busy: pid %s (%s) runs on it, so timings would be wrong"
                          % (d, gpus[d][1], r[1], r[2]))

def kill(rid):
    with lock:
        cancelled.add(rid)
        p = running.get(rid)
    if p is not None and p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass

def evaluate(req):
    rid = req["id"]
    try:
        if req["kernel"] not in req["files"]:
            raise Refused(125, "the kernel %r is not among the files sent" % req["kernel"])
        work = lay_out(req["files"], req["work"])
        kernel = os.path.join(work, *req["kernel"].split("/"))
        if req["check_gpu"]:
            check_gpus(req["devices"])
        p = subprocess.Popen([py, "-m", "harness", "eval", kernel, *req["args"]],
                             cwd=os.path.dirname(kernel), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
        with lock:
            running[rid] = p
            late = rid in cancelled
        if late:
            kill(rid)
        out, err = p.communicate()
        reply({"id": rid, "rc": p.returncode, "stdout": out.decode("utf-8", "replace"),
               "stderr": err.decode("utf-8", "replace")[-20000:]})
    except Refused as exc:
        reply({"id": rid, "rc": exc.code, "stdout": "", "stderr": "kstui-remote: " + exc.message})
    except Exception as exc:
        reply({"id": rid, "rc": 125, "stdout": "", "stderr": "kstui-remote: %s: %s" % (type(exc).__name__, exc)})
    finally:
        with lock:
            running.pop(rid, None)
            cancelled.discard(rid)

reply({"ready": True, "pid": os.getpid()})
for line in sys.stdin.buffer:
    req = json.loads(line)
    if "cancel" in req:
        kill(req["cancel"])
    else:
        threading.Thread(target=evaluate, args=(req,), daemon=True).start()
with lock:
    ids = list(running)
for rid in ids:
    kill(rid)
os._exit(0)
"""
