//! How `tiermem run` fails before the program runs: a message and an exit status.

/// Why `tiermem run` stops without a program status: the message and our
/// exit status.
#[derive(Debug)]
pub(super) struct Stop {
    pub(super) code: i32,
    pub(super) message: String,
}

impl Stop {
    pub(super) fn new(code: i32, message: impl Into<String>) -> Stop {
        Stop {
            code,
            message: message.into(),
        }
    }
}

impl From<anyhow::Error> for Stop {
    fn from(e: anyhow::Error) -> Stop {
        Stop::new(1, format!("{e:#}"))
    }
}
