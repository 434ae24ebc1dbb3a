//! Completion within milliseconds (DESIGN §5, "How the end of a job is learned"): Ray
//! has no job-finished callback, so each attempt's entrypoint goes to Ray behind a
//! small *watcher* that tells fairshare when the driver starts and when it exits.
//!
//! The watcher is a background Python process started by the entrypoint's own shell
//! before the submitted command runs (Ray runs entrypoints through `/bin/sh`, and every
//! Ray node has Python). It POSTs `started` at once, then waits for the shell to exit
//! (`os.pidfd_open`, no polling; where that is missing, its parent changing, checked
//! every 50 ms) and POSTs `ended`. It writes nothing to the job's logs and does not
//! change the job's exit code: the submitted command is the shell's last. Ray's own
//! process poll sees the same exit up to 100 ms later (measured: the watcher's word
//! arrives between 90 ms before and 50 ms after Ray's `end_time`, BENCHMARKS.md).
//!
//! A notification is a *hint*: it makes the monitor ask Ray about that attempt now
//! rather than at its next poll, and nothing else. The answer to `started` also says
//! whether the attempt must not run (its job was cancelled, or it is no longer the
//! job's current attempt): then the watcher ends the entrypoint's process group at
//! once. That closes a race inside Ray, measured on 2.60: a stop sent while Ray holds
//! a job PENDING can be reported STOPPED while the driver, started at that moment, runs
//! on to its end. Its URL carries an HMAC-SHA-256 of
//! the kind and the attempt's `submission_id` under a key of this deployment
//! (`notify.key`), so that it cannot be forged for another attempt; a forged, replayed
//! or late one changes nothing, because the status is always Ray's.

/// What a notification says happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HintKind {
    /// The entrypoint's shell started (Ray runs the attempt).
    Started,
    /// The entrypoint's shell exited (Ray ends the attempt within about 100 ms).
    Ended,
}

impl HintKind {
    /// The path segment: `started` or `ended`.
    pub fn as_str(self) -> &'static str {
        match self {
            HintKind::Started => "started",
            HintKind::Ended => "ended",
        }
    }

    /// The kind a path segment names.
    pub fn parse(s: &str) -> Option<HintKind> {
        match s {
            "started" => Some(HintKind::Started),
            "ended" => Some(HintKind::Ended),
            _ => None,
        }
    }
}

/// Hex digits of a signature: 128 bits of the HMAC.
pub const SIGNATURE_HEX: usize = 32;

/// Where attempts' watchers report, and the key that signs their URLs.
#[derive(Clone)]
pub struct Hints {
    /// The base URL at which Ray's job processes reach this service (no trailing `/`).
    base: String,
    key: Vec<u8>,
}

impl std::fmt::Debug for Hints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hints")
            .field("base", &self.base)
            .field("key", &"<hidden>")
            .finish()
    }
}

impl Hints {
    /// Hints reported to `base` (e.g. `http://10.0.0.5:8080`), signed with `key`.
    pub fn new(base: &str, key: &[u8]) -> Hints {
        Hints {
            base: base.trim_end_matches('/').to_string(),
            key: key.to_vec(),
        }
    }

    /// The hints of `[notify]` as [`crate::Application`] resolved it (URL and key
    /// filled in); `None` when notifications are off.
    pub fn of(n: &crate::config::NotifySettings) -> Option<Hints> {
        (n.enabled && !n.url.is_empty() && !n.key.is_empty())
            .then(|| Hints::new(&n.url, n.key.as_bytes()))
    }

    /// The signature of a `kind` notification for `submission_id`: the first
    /// [`SIGNATURE_HEX`] hex digits of HMAC-SHA-256(key, `kind` NUL `submission_id`).
    pub fn sign(&self, submission_id: &str, kind: HintKind) -> String {
        let mac = crate::mac::hmac_sha256(
            &self.key,
            &[kind.as_str().as_bytes(), &[0], submission_id.as_bytes()],
        );
        crate::mac::hex(&mac[..SIGNATURE_HEX / 2])
    }

    /// Whether `signature` is this deployment's for a `kind` notification of
    /// `submission_id` (compared in constant time).
    pub fn verify(&self, submission_id: &str, kind: HintKind, signature: &str) -> bool {
        use subtle::ConstantTimeEq;
        let want = self.sign(submission_id, kind);
        want.len() == signature.len() && bool::from(want.as_bytes().ct_eq(signature.as_bytes()))
    }

    /// The URL a watcher POSTs to for `kind` of `submission_id`.
    pub fn url(&self, submission_id: &str, kind: HintKind) -> String {
        format!(
            "{}/v1/attempts/{submission_id}/{}?sig={}",
            self.base,
            kind.as_str(),
            self.sign(submission_id, kind)
        )
    }

    /// `entrypoint` with the watcher in front of it, for the attempt `submission_id`.
    /// The submitted command is the shell's last, on a line of its own: its exit code
    /// is the job's, and any shell syntax in it (comments, several lines) is kept.
    ///
    /// The watcher is started through a subshell that exits at once (`( (…) & )`), so
    /// it is no child of the entrypoint's shell: a `wait` in the entrypoint (`a & b &
    /// wait`) waits for the entrypoint's own children only, not for the watcher, which
    /// waits for the shell (a fresh tester's `sleep 1 & wait` never ended). The
    /// watcher also leaves the shell's process group and session (`setsid`), so an
    /// entrypoint that signals its own group (`kill -TERM 0`), or Ray's stop, does not
    /// end it before it reports the end. Where the node has util-linux's `setsid`, the
    /// watcher is exec'd through it, so it leaves the group before Python starts:
    /// Python's own `os.setsid()` comes only after its start-up (hundreds of
    /// milliseconds on a loaded node), and an entrypoint that signalled its group
    /// within that time ended the watcher too (measured: 2 of 5 runs of `sleep 0.3;
    /// kill -TERM 0` with both cores busy). `$$` in a subshell is still the
    /// entrypoint's shell.
    pub fn wrap(&self, entrypoint: &str, submission_id: &str) -> String {
        let started = self.url(submission_id, HintKind::Started);
        let ended = self.url(submission_id, HintKind::Ended);
        // Single-quoted for sh: the script has no single quote, and the URLs are made
        // of [A-Za-z0-9:/._?=-] only (a submission id is a UUID, maybe with -N).
        format!(
            "( (s=; command -v setsid >/dev/null 2>&1 && s=setsid; for p in python3 python; do command -v \"$p\" >/dev/null 2>&1 && exec $s \"$p\" -c '{WATCHER}' \"$$\" '{started}' '{ended}'; done) </dev/null >/dev/null 2>&1 & )\n{entrypoint}"
        )
    }
}

/// The watcher's Python: leave the shell's session (`setsid`); POST `argv[2]`; if the
/// answer says `"stop":true` (the attempt was cancelled, or is no longer the job's
/// current one), end the entrypoint (SIGTERM to its process group, which Ray makes it
/// lead; where it leads none, to the shell and its children) and stop; else wait for
/// process `argv[1]` (the entrypoint's shell) to exit, and POST `argv[3]`. Where
/// `os.pidfd_open` is missing (Python before 3.9, Linux before 5.3) it polls the
/// shell's pid every 50 ms; a shell already gone counts as ended. Never fails the
/// job: every error is swallowed.
const WATCHER: &str = "import os,sys,time,select,urllib.request as u
try:os.setsid()
except Exception:pass
def h(x):
 try:return u.urlopen(u.Request(x,data=b\"{}\",method=\"POST\",headers={\"content-type\":\"application/json\"}),timeout=10).read()
 except Exception:return b\"\"
p=int(sys.argv[1])
if b\"\\\"stop\\\":true\" in h(sys.argv[2]):
 try:
  if os.getpgid(p)==p:os.killpg(p,15)
  else:
   k=[]
   for c in os.listdir(\"/proc\"):
    try:
     if c.isdigit() and int(open(\"/proc/\"+c+\"/stat\").read().rsplit(\")\",1)[1].split()[1])==p and int(c)!=os.getpid():k.append(int(c))
    except Exception:pass
   for c in [p]+k:
    try:os.kill(c,15)
    except Exception:pass
 except Exception:pass
 sys.exit()
try:
 f=os.pidfd_open(p);select.select([f],[],[])
except Exception:
 while 1:
  try:os.kill(p,0);time.sleep(0.05)
  except Exception:break
h(sys.argv[3])";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_is_for_one_kind_of_one_attempt_under_one_key() {
        let h = Hints::new("http://127.0.0.1:8080/", b"0123456789abcdef");
        let sid = "01a23b35-4bf2-7293-b49e-0def5062e6ba-2";
        let sig = h.sign(sid, HintKind::Ended);
        assert_eq!(sig.len(), SIGNATURE_HEX);
        assert!(h.verify(sid, HintKind::Ended, &sig));
        assert!(!h.verify(sid, HintKind::Started, &sig));
        assert!(!h.verify(
            "01a23b35-4bf2-7293-b49e-0def5062e6ba",
            HintKind::Ended,
            &sig
        ));
        assert!(!h.verify(sid, HintKind::Ended, &sig[..31]));
        let other = Hints::new("http://127.0.0.1:8080", b"another key, 16+");
        assert!(!other.verify(sid, HintKind::Ended, &sig));
        assert_eq!(
            h.url(sid, HintKind::Ended),
            format!("http://127.0.0.1:8080/v1/attempts/{sid}/ended?sig={sig}")
        );
    }

    #[test]
    fn the_wrapper_runs_the_entrypoint_last_and_quotes_nothing_of_it() {
        let h = Hints::new("http://127.0.0.1:8080", b"0123456789abcdef");
        let ep = "python -c \"print('x')\"  # a comment\necho $HOME";
        let w = h.wrap(ep, "abc");
        assert!(w.ends_with(&format!("& )\n{ep}")), "{w}");
        assert!(!WATCHER.contains('\''));
        assert!(w.contains("/v1/attempts/abc/started?sig="));
        assert!(w.contains("/v1/attempts/abc/ended?sig="));
    }
}
