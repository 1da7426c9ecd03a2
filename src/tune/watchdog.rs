//! The parent's side of worker isolation: starting `kiln tune-worker` processes, sending each a
//! job and waiting for its answer under a watchdog. Past the deadline the worker is killed and the
//! candidate recorded as `timeout`; a worker that dies (a trap, an illegal address that corrupts
//! its context) is recorded as `crash`; either way the caller starts a fresh worker for the next
//! job and the run goes on.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::worker::{Job, JobResult};
use super::Status;
use crate::error::{Error, Result};

/// The watchdog's deadline for a job: a floor, plus (for a fresh worker) its start-up, plus a
/// generous multiple of what the launches should take given the best time so far.
pub fn deadline(job: &Job, floor: Duration, fresh: bool) -> Duration {
    let launches = (job.warmup + job.reps + 8) as f64;
    let per_launch = job.best_ms.filter(|b| b.is_finite()).unwrap_or(50.0);
    let scaled = Duration::from_secs_f64(per_launch * launches * 20.0 / 1e3);
    floor + scaled + if fresh { floor * 3 } else { Duration::ZERO }
}

/// A worker process seen from the parent.
pub struct WorkerHandle {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: Arc<Mutex<Vec<String>>>,
    jobs: usize,
}

/// How to start workers: the kiln binary and the arguments before `tune-worker`.
#[derive(Debug, Clone)]
pub struct Spawner {
    pub exe: PathBuf,
    pub args: Vec<String>,
}

impl Spawner {
    pub fn spawn(&self, ordinal: u32) -> Result<WorkerHandle> {
        let mut child = Command::new(&self.exe)
            .args(&self.args)
            .arg("tune-worker")
            .arg("--gpu")
            .arg(ordinal.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| Error::Io {
                what: "starting a tuning worker",
                path: self.exe.clone(),
                source,
            })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(Error::invalid("a tuning worker without pipes"));
        };
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout)
                .lines()
                .map_while(std::result::Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let tail = Arc::new(Mutex::new(Vec::new()));
        let t2 = tail.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr)
                .lines()
                .map_while(std::result::Result::ok)
            {
                if let Ok(mut t) = t2.lock() {
                    t.push(line);
                    let n = t.len();
                    if n > 20 {
                        t.drain(..n - 20);
                    }
                }
            }
        });
        Ok(WorkerHandle {
            child,
            stdin,
            lines,
            stderr: tail,
            jobs: 0,
        })
    }
}

impl WorkerHandle {
    /// Sends `job` and waits for its answer under the watchdog. `None` in the second slot means
    /// the worker is gone (killed or dead) and must be replaced.
    pub fn run(mut self, job: &Job, floor: Duration) -> (JobResult, Option<WorkerHandle>) {
        let limit = deadline(job, floor, self.jobs == 0);
        self.jobs += 1;
        let line = match serde_json::to_string(job) {
            Ok(l) => l,
            Err(e) => {
                return (
                    JobResult::failed(job.id, Status::Error, e.to_string(), false),
                    Some(self),
                )
            }
        };
        if writeln!(self.stdin, "{line}")
            .and_then(|_| self.stdin.flush())
            .is_err()
        {
            let why = self.reap();
            return (
                JobResult::failed(
                    job.id,
                    Status::Crash,
                    format!("the worker was gone before the job: {why}"),
                    true,
                ),
                None,
            );
        }
        let until = std::time::Instant::now() + limit;
        // Lines that are not this job's answer (stray output of a library) are skipped.
        let answer = loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => match serde_json::from_str::<JobResult>(&l) {
                    Ok(r) if r.id == job.id => break Ok(r),
                    _ => continue,
                },
                Err(e) => break Err(e),
            }
        };
        match answer {
            Ok(r) if r.fatal => {
                self.reap();
                (r, None)
            }
            Ok(r) => (r, Some(self)),
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                (
                    JobResult::failed(
                        job.id,
                        Status::Timeout,
                        format!(
                            "no answer within {:.1} s: killed the worker",
                            limit.as_secs_f64()
                        ),
                        true,
                    ),
                    None,
                )
            }
            Err(RecvTimeoutError::Disconnected) => {
                let why = self.reap();
                (
                    JobResult::failed(
                        job.id,
                        Status::Crash,
                        format!("the worker died: {why}"),
                        true,
                    ),
                    None,
                )
            }
        }
    }

    /// Ends the worker (politely, then by force) and says how it ended.
    fn reap(&mut self) -> String {
        let mut status = None;
        for _ in 0..50 {
            if let Ok(Some(s)) = self.child.try_wait() {
                status = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = match status {
            Some(s) => s,
            None => {
                let _ = self.child.kill();
                match self.child.wait() {
                    Ok(s) => s,
                    Err(e) => return format!("could not reap it: {e}"),
                }
            }
        };
        let tail = self
            .stderr
            .lock()
            .map(|t| {
                t.iter()
                    .rev()
                    .take(3)
                    .rev()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" | ")
            })
            .unwrap_or_default();
        let how = match status.code() {
            Some(c) => format!("exit code {c}"),
            None => {
                use std::os::unix::process::ExitStatusExt;
                format!("signal {}", status.signal().unwrap_or(0))
            }
        };
        if tail.is_empty() {
            how
        } else {
            format!("{how}; stderr: {tail}")
        }
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        // Closing stdin ends a healthy worker; one still running a job is killed.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::worker::tests::job;

    #[test]
    fn deadlines_scale_with_the_best_time_above_a_floor() {
        let floor = Duration::from_secs(5);
        let mut j = job(0);
        j.best_ms = Some(0.3);
        let d = deadline(&j, floor, false);
        assert!(d >= floor && d < floor + Duration::from_secs(1), "{d:?}");
        j.best_ms = Some(100.0);
        assert!(deadline(&j, floor, false) > Duration::from_secs(60));
        assert!(deadline(&job(0), floor, true) > deadline(&job(0), floor, false));
    }
}
