//! What `starling dev` shows while it runs: a bar on stderr on a terminal, a line every two
//! seconds otherwise, nothing when the summary is JSON.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Live progress on a terminal (a bar on stderr), plain lines otherwise.
pub(super) struct Progress {
    quiet: bool,
    terminal: bool,
    last_line: std::sync::Mutex<Instant>,
}

impl Progress {
    pub(super) fn new(quiet: bool) -> Progress {
        Progress {
            quiet,
            terminal: std::io::stderr().is_terminal(),
            last_line: std::sync::Mutex::new(Instant::now()),
        }
    }

    pub(super) fn say(&self, line: &str) {
        if !self.quiet {
            eprintln!("{line}");
        }
    }

    pub(super) fn bar(&self, total: u64) -> Option<indicatif::ProgressBar> {
        if self.quiet || !self.terminal {
            return None;
        }
        let bar = indicatif::ProgressBar::new(total);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{bar:40.cyan/blue} {pos:>5}/{len} {elapsed:>4} {msg}",
        ) {
            bar.set_style(style);
        }
        Some(bar)
    }

    pub(super) fn update(
        &self,
        bar: &Option<indicatif::ProgressBar>,
        position: u64,
        message: &str,
    ) {
        match bar {
            Some(bar) => {
                bar.set_position(position);
                bar.set_message(message.to_string());
            }
            None if !self.quiet => {
                let mut last = self
                    .last_line
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                if last.elapsed() >= Duration::from_secs(2) {
                    *last = Instant::now();
                    eprintln!("  {message}");
                }
            }
            None => {}
        }
    }

    pub(super) fn finish(&self, bar: Option<indicatif::ProgressBar>, line: &str) {
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        self.say(line);
    }
}
