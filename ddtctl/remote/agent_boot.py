"""How a host runs ddtctl's agent: the agent's bytes and sha256, and AGENT_BOOT, the few lines of python that
transport.Connection passes to the host's interpreter with `-c` before any agent operation (stdlib only; no
paramiko here)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ddtctl.safeio import read_regular

AGENT_SOURCE = read_regular(Path(__file__).parent / "agent.py", 4 << 20, what="agent source")
AGENT_SHA = hashlib.sha256(AGENT_SOURCE).hexdigest()
AGENT_MISSING_RC = 97  # the boot found no verified agent and its stdin did not carry one

# Runs the agent (python >= 3.8, stdlib only). Refuses a work dir (or its .ddtctl/) that others can write, or
# that belongs to another user: whoever can write there can replace what we run. Reads the installed agent and
# runs it only if its sha256 is AGENT_SHA; otherwise prints NEED, reads exactly N bytes from stdin (never
# more: the rest of stdin belongs to the agent), checks their sha256 and installs them atomically (mode 0600).
# Then it executes the verified bytes themselves, not the file again (issue #14: a file planted at the agent's
# path was run because only its existence was checked). Prints HAVE or NEED first; a refusal is one JSON line
# {"ok": false, "error": ...}.
AGENT_BOOT = (
    "import hashlib,json,os,stat,sys\n"
    "a,h,n=sys.argv[1],sys.argv[2],int(sys.argv[3])\n"
    "def no(m):\n print(json.dumps({'ok':False,'error':m}),flush=True);sys.exit(0)\n"
    "d=os.path.dirname(a) or '.';w=os.path.dirname(d) or '.'\n"
    "for p in (w,d):\n"
    " try:os.makedirs(p,0o700)\n"
    " except FileExistsError:pass\n"
    " except OSError as e:no('cannot create the work dir %s: %s'%(p,e.strerror))\n"
    " s=os.stat(p) if p==w else os.lstat(p)\n"
    " if not stat.S_ISDIR(s.st_mode):no('%s is not a directory'%p)\n"
    " if s.st_mode&0o002:no('the work dir %s is writable by others (mode %o); "
    "refusing to run the agent from it'"
    "%(os.path.abspath(p),stat.S_IMODE(s.st_mode)))\n"
    " if s.st_uid not in (os.geteuid(),0):no('the work dir %s belongs to uid %d, not to this user; "
    "refusing to run the"
    " agent from it'%(os.path.abspath(p),s.st_uid))\n"
    "try:\n with open(a,'rb') as f:b=f.read()\n"
    "except OSError:b=None\n"
    "if b is not None and hashlib.sha256(b).hexdigest()==h:print('HAVE',flush=True)\n"
    "else:\n"
    " print('NEED',flush=True);b=b''\n"
    " while len(b)<n:\n  c=os.read(0,n-len(b))\n  if not c:sys.exit(97)\n  b+=c\n"
    " if hashlib.sha256(b).hexdigest()!=h:no('the agent arrived corrupted (sha256 mismatch)')\n"
    " t='%s.tmp.%d'%(a,os.getpid())\n"
    " try:\n"
    "  fd=os.open(t,os.O_WRONLY|os.O_CREAT|os.O_EXCL,0o600);os.write(fd,b);os.fsync(fd);os.close(fd);"
    "os.replace(t,a)\n"
    " except OSError as e:no('cannot install the agent in %s: %s'%(d,e.strerror))\n"
    "sys.argv=[a]+sys.argv[4:]\n"
    "exec(compile(b,a,'exec'),{'__name__':'__main__','__file__':a,'__builtins__':__builtins__})\n"
)
