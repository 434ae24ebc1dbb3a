//! Reading Standard Workload Format traces (Feitelson et al., the Parallel Workloads
//! Archive's SWF: <https://www.cs.huji.ac.il/labs/parallel/workload/swf.html>), plain or
//! gzip-compressed (by content; a name ending in `.gz` must be gzip: [`read_trace`]).
//!
//! One job a line, 18 whitespace-separated fields, `;` header comments. Used fields
//! (1-based): 1 job number, 2 submit time (s), 3 wait time (s), 4 run time (s),
//! 5 allocated processors, 8 requested processors, 9 requested time (s), 12 user id,
//! 13 group id. `-1` means unknown.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// One job of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceJob {
    /// Field 1.
    pub number: u64,
    /// Field 2: seconds from the trace start.
    pub submit: f64,
    /// Field 3: the wait the original scheduler gave it, seconds (`None` if unknown).
    pub recorded_wait: Option<f64>,
    /// Field 4: run time, seconds.
    pub run: f64,
    /// Field 5 (allocated), else field 8 (requested): processors, at least 1.
    pub cpus: u32,
    /// Field 9: the requested (wall-clock limit) time, seconds, if given and
    /// positive; the simulator's runtime estimate for backfilling.
    pub requested_time: Option<f64>,
    /// Field 12, as a string user id ("u62").
    pub user: String,
    /// Field 13, as a group path ("g6"), if the trace gives one.
    pub group: Option<String>,
}

impl TraceJob {
    /// A job with no recorded wait and no requested time; `user` as given
    /// (e.g. "u7").
    pub fn new(number: u64, submit: f64, run: f64, cpus: u32, user: &str) -> TraceJob {
        TraceJob {
            number,
            submit,
            recorded_wait: None,
            run,
            cpus,
            requested_time: None,
            user: user.to_owned(),
            group: None,
        }
    }

    /// The same job in group `group`.
    #[must_use]
    pub fn in_group(mut self, group: &str) -> TraceJob {
        self.group = Some(group.to_owned());
        self
    }

    /// The same job with requested time `seconds` (its runtime estimate).
    #[must_use]
    pub fn with_requested_time(mut self, seconds: f64) -> TraceJob {
        self.requested_time = Some(seconds);
        self
    }
}

/// A parsed trace.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Jobs in submit order (ties by job number).
    pub jobs: Vec<TraceJob>,
    /// The header's `MaxProcs`, if given.
    pub max_procs: Option<u32>,
    /// Lines skipped: unknown run time, user or processors, or malformed.
    pub skipped: usize,
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    // `cause`, not `source`: the message holds it already, and as a source it was
    // printed twice in an error chain ("os error 2: os error 2").
    #[error("cannot read trace {path}: {cause}")]
    Io { path: String, cause: std::io::Error },
    /// The name ends in `.gz` but the content does not start as gzip does.
    #[error(
        "trace {path} is not gzip: its name ends in .gz but it does not start with gzip's \
         magic bytes 1f 8b (a plain SWF file needs a name without .gz)"
    )]
    NotGzip { path: String },
}

/// Reads a trace from `path`; gzip is detected by its magic bytes, and a name ending
/// in `.gz` (any case) must be gzip.
///
/// A `.gz` that is not gzip is refused rather than read as text: the name says what
/// the file should be, so one that is not (a download's error page, a file
/// half-written or renamed by mistake) is most likely the wrong file, and read as
/// text it could still yield jobs (a tester's plain text named `.gz` ran).
///
/// Errors: the file cannot be opened or decompressed, or is named `.gz` and is not
/// gzip. Malformed lines are counted in [`Trace::skipped`], not errors.
pub fn read_trace(path: &Path) -> Result<Trace, TraceError> {
    let io = |cause| TraceError::Io {
        path: path.display().to_string(),
        cause,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut magic = [0u8; 2];
    let n = file.read(&mut magic).map_err(io)?;
    let gzip = n == 2 && magic == [0x1f, 0x8b];
    let named_gz = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    if named_gz && !gzip {
        return Err(TraceError::NotGzip {
            path: path.display().to_string(),
        });
    }
    let file = std::fs::File::open(path).map_err(io)?;
    let reader: Box<dyn Read> = if gzip {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    parse(BufReader::new(reader)).map_err(io)
}

/// Parses SWF text.
pub fn parse(reader: impl BufRead) -> std::io::Result<Trace> {
    let mut trace = Trace::default();
    for (i, line) in reader.lines().enumerate() {
        let line = line?;
        // A byte order mark before the first line (an editor's) is not part of it: it
        // hid a MaxProcs header from a tester.
        let line = if i == 0 {
            line.trim_start_matches('\u{feff}')
        } else {
            &line
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix(';') {
            if let Some((key, value)) = comment.split_once(':') {
                if key.trim() == "MaxProcs" {
                    trace.max_procs = value.trim().parse().ok();
                }
            }
            continue;
        }
        match parse_line(line) {
            Some(job) => trace.jobs.push(job),
            None => trace.skipped += 1,
        }
    }
    trace
        .jobs
        .sort_by(|a, b| a.submit.total_cmp(&b.submit).then(a.number.cmp(&b.number)));
    Ok(trace)
}

fn parse_line(line: &str) -> Option<TraceJob> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 12 {
        return None;
    }
    // `inf` parses as a float: a job that never ends (or starts) is not a job, nor is
    // one whose times pass 100 years (a tester's `1e300` made a 301-digit makespan).
    let longest = crate::config::MAX_DURATION.as_secs_f64();
    let num = |i: usize| f[i].parse::<f64>().ok().filter(|v| v.abs() <= longest);
    let number = f[0].parse::<u64>().ok()?;
    let submit = num(1).filter(|v| *v >= 0.0)?;
    let recorded_wait = num(2).filter(|v| *v >= 0.0);
    let run = num(3).filter(|v| *v >= 0.0)?;
    let cpus = num(4)
        .filter(|v| *v >= 1.0)
        .or_else(|| num(7).filter(|v| *v >= 1.0))? as u32;
    let user = f[11].parse::<i64>().ok().filter(|u| *u >= 0)?;
    let requested_time = num(8).filter(|v| *v > 0.0);
    let group = f
        .get(12)
        .and_then(|g| g.parse::<i64>().ok())
        .filter(|g| *g >= 0)
        .map(|g| format!("g{g}"));
    Some(TraceJob {
        number,
        submit,
        recorded_wait,
        run,
        cpus,
        requested_time,
        user: format!("u{user}"),
        group,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_header_jobs_and_skips_unknowns() {
        let text = "; MaxProcs: 128\n; Note: x\n\
            1 10 5 100 4 -1 -1 4 3600 -1 1 7 7 -1 -1 1 -1 -1\n\
            2 0 1 50 -1 -1 -1 2 3600 -1 1 8 8 -1 -1 1 -1 -1\n\
            3 20 1 -1 4 -1 -1 4 3600 -1 1 7 7 -1 -1 1 -1 -1\n\
            4 30 1 10 4 -1 -1 4 3600 -1 1 -1 7 -1 -1 1 -1 -1\n\
            5 40 1 inf 4 -1 -1 4 3600 -1 1 7 7 -1 -1 1 -1 -1\n\
            6 inf 1 10 4 -1 -1 4 3600 -1 1 7 7 -1 -1 1 -1 -1\n\
            7 1e300 1 10 4 -1 -1 4 3600 -1 1 7 7 -1 -1 1 -1 -1\n\
            8 50 1 1e300 4 -1 -1 4 3600 -1 1 7 7 -1 -1 1 -1 -1\n\
            garbage\n";
        let t = parse(text.as_bytes()).unwrap();
        assert_eq!(t.max_procs, Some(128));
        assert_eq!(
            t.skipped, 7,
            "a runtime or submit time of inf, or beyond 100 years, is not a job"
        );
        assert_eq!(t.jobs.len(), 2);
        assert_eq!(t.jobs[0].number, 2, "sorted by submit time");
        assert_eq!(
            t.jobs[0].cpus, 2,
            "requested processors when allocated is unknown"
        );
        assert_eq!(t.jobs[1].user, "u7");
        assert_eq!(t.jobs[1].run, 100.0);
        assert_eq!(t.jobs[1].group.as_deref(), Some("g7"), "field 13");
        let t = parse("5 0 1 50 2 -1 -1 2 60 -1 1 8 -1 -1 -1 1 -1 -1\n".as_bytes()).unwrap();
        assert_eq!(t.jobs[0].group, None, "an unknown group");
    }

    #[test]
    fn reads_the_shipped_coare_trace() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/traces/coare-saliksik-2020.swf.gz");
        let t = read_trace(&path).unwrap();
        assert_eq!(t.max_procs, Some(1728));
        assert_eq!(t.jobs.len() + t.skipped, 19_760);
    }

    /// A trace whose name ends in `.gz` but which is not gzip is refused, naming it
    /// (a tester's plain text named `.gz` was read as plain text); gzip is still
    /// recognised by its content under any name.
    #[test]
    fn a_trace_named_gz_that_is_not_gzip_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let text = "; MaxProcs: 4\n1 0 0 10 1 -1 -1 1 60 -1 1 1 1 -1 -1 1 -1 -1\n";
        for name in ["t.swf.gz", "T.SWF.GZ", "empty.gz"] {
            let path = dir.path().join(name);
            std::fs::write(&path, if name == "empty.gz" { "" } else { text }).unwrap();
            let error = read_trace(&path).unwrap_err().to_string();
            assert!(
                error.contains(&format!("{} is not gzip", path.display())),
                "{name}: {error}"
            );
        }
        let plain = dir.path().join("t.swf");
        std::fs::write(&plain, text).unwrap();
        assert_eq!(read_trace(&plain).unwrap().jobs.len(), 1);
        let gzipped = dir.path().join("gzip-named-plainly.swf");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, text.as_bytes()).unwrap();
        std::fs::write(&gzipped, gz.finish().unwrap()).unwrap();
        assert_eq!(read_trace(&gzipped).unwrap().jobs.len(), 1);
    }

    /// A UTF-8 byte order mark before the header does not hide it.
    #[test]
    fn a_byte_order_mark_does_not_hide_the_header() {
        let t = parse(
            "\u{feff}; MaxProcs: 64\n1 0 0 10 1 -1 -1 1 60 -1 1 1 1 -1 -1 1 -1 -1\n".as_bytes(),
        )
        .unwrap();
        assert_eq!(t.max_procs, Some(64));
        assert_eq!(t.jobs.len(), 1);
    }
}
