//! The progress line of a long order search: drawn on stderr only when it is a
//! terminal and the search has run for half a second, redrawn at most ten times a
//! second, erased when the search ends (so logs and pipes never see it).

use super::Objective;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub(super) struct Progress {
    on: bool,
    start: Instant,
    last: Option<Instant>,
    n: usize,
    budget: f64,
    obj: Objective,
}

impl Progress {
    pub fn new(wanted: bool, n: usize, budget: f64, obj: Objective) -> Progress {
        let on = wanted && budget > 0.5 && std::io::stderr().is_terminal();
        Progress { on, start: Instant::now(), last: None, n, budget, obj }
    }

    pub fn tick(&mut self, trials: usize, best: f64) {
        if !self.on {
            return;
        }
        let now = Instant::now();
        let t = now - self.start;
        if t < Duration::from_millis(500) || self.last.is_some_and(|l| now - l < Duration::from_millis(100)) {
            return;
        }
        self.last = Some(now);
        let what = match self.obj {
            Objective::Flops => "flops",
            Objective::Size => "elements",
            Objective::Combined => "cost",
        };
        let mut e = std::io::stderr().lock();
        let _ = write!(
            e,
            "\r\x1b[Ktcc: ordering {} tensors: {trials} trials, best {best:.3e} {what} ({:.1}/{:.1} s)",
            self.n,
            t.as_secs_f64(),
            self.budget
        );
        let _ = e.flush();
    }

    pub fn finish(&mut self) {
        if self.on && self.last.is_some() {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[K");
            let _ = e.flush();
        }
    }
}
