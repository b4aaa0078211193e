//! Every `TIERMEM_*` setting on one page: its environment variable, its
//! flag, its default and what it does. The README's Configuration table and
//! the list at the top of `include/tiermem.h` are checked against this table
//! (`crates/tiermem-cli/tests/config_docs.rs`), so the three never disagree.
//!
//! Every value is found by [`resolve`]: the flag, else the environment,
//! else the table's default. It is then parsed where its type lives
//! ([`crate::Config::from_lookup`] and the `from_lookup` of each group of
//! settings), so a default goes through the same parser as a value the user
//! wrote, and tests check that the table's defaults are the types' defaults.

/// One setting, as the README's Configuration table shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    /// The environment variable.
    pub env: &'static str,
    /// For a switch that is on when set, the value that turns it on (`1`);
    /// empty for a setting that takes a value.
    pub on_value: &'static str,
    /// The command-line flag, empty if there is none.
    pub flag: &'static str,
    /// The only command that has the flag (`bench`), empty if every command
    /// that takes the setting has it.
    pub flag_of: &'static str,
    /// The default, as the README words it (Markdown).
    pub default: &'static str,
    /// The default as a value the setting's parser takes, which [`resolve`]
    /// hands on when neither a flag nor the environment gives one. Empty
    /// where the default is not a fixed value: worked out at run time (a
    /// share of RAM aside, one thread per CPU, the free space), taken from
    /// another setting (the organization knobs follow the preset), or the
    /// absence of a value (no preset, no stats file).
    pub value: &'static str,
    /// What the setting does, as the README words it (Markdown).
    pub doc: &'static str,
    /// Whether the library reads it (and `include/tiermem.h` lists it), as
    /// opposed to the `tiermem` command alone.
    pub read_by_library: bool,
}

impl Setting {
    /// This setting's row of the README's Configuration table.
    pub fn readme_row(&self) -> String {
        let env = if self.on_value.is_empty() {
            format!("`{}`", self.env)
        } else {
            format!("`{}={}`", self.env, self.on_value)
        };
        let flag = match (self.flag, self.flag_of) {
            ("", _) => String::new(),
            (flag, "") => format!("`{flag}`"),
            (flag, of) => format!("`{flag}` ({of})"),
        };
        let flag = if flag.is_empty() {
            " ".to_string()
        } else {
            format!(" {flag} ")
        };
        format!("| {} | {env} |{flag}| {} |", self.doc, self.default)
    }
}

/// The settings, in the order of the README's table.
pub const SETTINGS: &[Setting] = &[
    Setting {
        env: "TIERMEM_DRAM",
        on_value: "",
        flag: "--dram",
        flag_of: "",
        default: "25% of RAM (`tiermem run` and the API; `bench`, `bench-redis` and `probe` default to 256M, 320M and 64M)",
        value: "25%",
        doc: "DRAM budget",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_BACKING",
        on_value: "",
        flag: "--backing",
        flag_of: "",
        default: "`/var/tmp`",
        value: "/var/tmp",
        doc: "backing store: a directory (a private file is created there), a file (yours, mode 0600, not a symbolic link, and empty or written by tiermem before: a file holding other data is refused, never overwritten) or a block device",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_BACKING_SIZE",
        on_value: "",
        flag: "",
        flag_of: "",
        default: "free space",
        value: "",
        doc: "cap on the backing store",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_PAGE_SIZE",
        on_value: "",
        flag: "--page-size",
        flag_of: "",
        default: "4K",
        value: "4K",
        doc: "page size, a power of two from 4 KiB to 2 MiB",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_POLICY",
        on_value: "",
        flag: "--policy",
        flag_of: "",
        default: "clock",
        value: "clock",
        doc: "replacement policy: `clock`, `fifo`, `s3fifo` (scan-resistant)",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_HANDLER_THREADS",
        on_value: "",
        flag: "--handler-threads",
        flag_of: "",
        default: "one per CPU",
        value: "",
        doc: "userfaultfd handler threads, one pinned per CPU",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_FAULTS",
        on_value: "",
        flag: "--faults",
        flag_of: "bench",
        default: "handler",
        value: "handler",
        doc: "who resolves a fault: `handler` threads, or `signal`: the faulting thread itself, through SIGBUS (see [Signal delivery](#signal-delivery))",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_IO_ENGINE",
        on_value: "",
        flag: "",
        flag_of: "",
        default: "io_uring",
        value: "io_uring",
        doc: "page reads: `io_uring` (many in flight per handler, registered buffers; pread where io_uring is unavailable, shown in the stats) or `psync`",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_IO_DEPTH",
        on_value: "",
        flag: "",
        flag_of: "",
        default: "32",
        value: "32",
        doc: "read requests one handler keeps in flight",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_IO_POLL",
        on_value: "",
        flag: "",
        flag_of: "",
        default: "none",
        value: "none",
        doc: "completion polling: `none`; `sqpoll` (a kernel thread polls the submission queue; falls back with a note where refused); `iopoll` or `hybrid` (device polling: needs a backing device with poll queues, and falls back to interrupts with a note saying why, e.g. `/sys/dev/block/254:0/queue/io_poll is 0`)",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_ASYNC_IO",
        on_value: "",
        flag: "--async-io",
        flag_of: "bench",
        default: "auto",
        value: "auto",
        doc: "asynchronous I/O: when eviction moves dirty pages out with `UFFDIO_MOVE` so the kernel can keep those that io_uring or AIO has pinned (`auto`: once the program sets up a ring or an AIO context; `on`: from the start; `off`: never). See [Failure behaviour](#failure-behaviour)",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_IDLE_SPIN_US",
        on_value: "",
        flag: "--idle-spin",
        flag_of: "bench",
        default: "200",
        value: "200",
        doc: "idle spin: how long a fault handler keeps polling for the next fault or read completion before it sleeps, in microseconds (0 to 10000; `0` sleeps at once). While a program pages, the handlers keep every vCPU awake instead of letting it halt, and yield to any other runnable thread on their CPU (see [On a VM](#on-a-vm-idle-vcpus-that-halt-at-once))",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_WATERMARK_SCALE_FACTOR",
        on_value: "",
        flag: "",
        flag_of: "",
        default: "1/32 of the budget, at most 4096 pages",
        value: "",
        doc: "free DRAM the evictor keeps, in ten-thousandths of the budget (as `vm.watermark_scale_factor`): it starts below half of it and stops at all of it",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_READAHEAD",
        on_value: "",
        flag: "",
        flag_of: "",
        default: "on",
        value: "on",
        doc: "read-ahead of sequential and strided streams, and of the page after a miss while misses come in adjacent pairs: `on`, `off`",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_PREDICT_WRITES",
        on_value: "",
        flag: "",
        flag_of: "",
        default: "on",
        value: "on",
        doc: "write prediction: once most pages read in get written, read faults (and, on a score of their own, read-ahead windows) install pages writable (see [Design](#design)): `on`, `off`",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_PRESET",
        on_value: "",
        flag: "--preset",
        flag_of: "",
        default: "none",
        value: "",
        doc: "**cache organization** (see [Cache organization](#cache-organization)): preset `memory-mode`",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_ASSOCIATIVITY",
        on_value: "",
        flag: "--associativity",
        flag_of: "",
        default: "0",
        value: "",
        doc: "associativity: `0` fully associative, `1` direct-mapped, `N` N-way by page number",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_PREFETCH",
        on_value: "",
        flag: "--prefetch",
        flag_of: "",
        default: "adaptive",
        value: "",
        doc: "prefetch degree: pages read with every miss (`0`: none); replaces the adaptive read-ahead",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_WRITE_POLICY",
        on_value: "",
        flag: "--write-policy",
        flag_of: "",
        default: "write-back",
        value: "",
        doc: "write policy: `write-back`, `write-through`",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_INCLUSION",
        on_value: "",
        flag: "--inclusion",
        flag_of: "",
        default: "inclusive",
        value: "",
        doc: "inclusion: `inclusive`, `exclusive`",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_CHECKSUMS",
        on_value: "",
        flag: "",
        flag_of: "",
        default: "on",
        value: "on",
        doc: "checksum (crc32c of page number, slot and bytes) checked on every read back: `on`, `off`",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_ENCRYPT",
        on_value: "",
        flag: "--encrypt",
        flag_of: "",
        default: "off",
        value: "off",
        doc: "encryption at rest (AES-256-GCM per page, a random key per process locked in DRAM; its tag replaces the checksum): `on`, `off`",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_COMPRESS",
        on_value: "",
        flag: "--compress",
        flag_of: "bench",
        default: "lz4",
        value: "lz4",
        doc: "compressed tier: `lz4` keeps evicted pages LZ4-compressed in DRAM before the store, at LZ4HC's mid level (see [The compressed tier](#the-compressed-tier)); `lz4-fast` uses LZ4's fast mode instead; `off` sends them straight to the store",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_COMPRESS_SHARE",
        on_value: "",
        flag: "--compress-share",
        flag_of: "bench",
        default: "50",
        value: "50",
        doc: "most of the budget the compressed pool may take: a percent (1–90), or `auto`, which adapts it between 10% and 90% (from 50%) to where the pool's hits land",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_COMPRESS_DICT",
        on_value: "",
        flag: "--compress-dict",
        flag_of: "bench",
        default: "on",
        value: "on",
        doc: "compress with a 64 KiB dictionary gathered from pages that compress, used while it saves 8% and replaced when it stops paying: `on`, `off`",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_IO_DEADLINE",
        on_value: "",
        flag: "",
        flag_of: "",
        default: "60",
        value: "60",
        doc: "how long writes may keep failing before the program is stopped, in seconds (see [Failure behaviour](#failure-behaviour))",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_INJECT_FAULTS",
        on_value: "",
        flag: "",
        flag_of: "",
        default: "none",
        value: "",
        doc: "make the N-th read or write request fail with EIO, for tests: `read:N`, `write:N`, `read:N-M`, `write:N-`, comma-separated, up to 16 of each",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_MMAP_THRESHOLD",
        on_value: "",
        flag: "--mmap-threshold",
        flag_of: "",
        default: "128K",
        value: "128K",
        doc: "smallest anonymous `mmap` tiered by `tiermem run`",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_STATS",
        on_value: "1",
        flag: "--stats",
        flag_of: "",
        default: "off",
        value: "",
        doc: "print a summary at exit (`tiermem run`)",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_STATS_FILE",
        on_value: "",
        flag: "--stats-file",
        flag_of: "",
        default: "none",
        value: "",
        doc: "write the summary as JSON at exit (`%p`: the pid)",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_CONTROL",
        on_value: "",
        flag: "",
        flag_of: "",
        default: "on",
        value: "",
        doc: "the control socket of `tiermem ctl` and `tiermem top` (`off`: none)",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_NO_INHERIT",
        on_value: "1",
        flag: "--no-inherit",
        flag_of: "",
        default: "off",
        value: "",
        doc: "exec'd children run untiered (`tiermem run`)",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_MEMFD",
        on_value: "off",
        flag: "--untiered-memfd",
        flag_of: "",
        default: "tiered while private",
        value: "",
        doc: "memfds left to the kernel, never tiered (`tiermem run`)",
        read_by_library: true,
    },
    Setting {
        env: "TIERMEM_LIB",
        on_value: "",
        flag: "",
        flag_of: "",
        default: "next to the `tiermem` binary",
        value: "",
        doc: "where `tiermem run` finds `libtiermem.so`",
        read_by_library: false,
    },
];

/// The setting whose variable is `env`.
pub fn setting(env: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.env == env)
}

/// The setting whose variable is `env`, for the runtime's own constants.
///
/// # Panics
/// If `env` is not in [`SETTINGS`]: a variable read without a row in the
/// table is a bug, which `the_constants_of_each_group_are_in_the_table`
/// catches first.
pub fn known(env: &str) -> &'static Setting {
    match setting(env) {
        Some(s) => s,
        None => panic!("{env} is not in tiermem_core::settings::SETTINGS"),
    }
}

/// Where a setting's value comes from, for messages that say so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A command-line flag, by name (`--dram`).
    Flag(&'static str),
    /// An environment variable, by name (`TIERMEM_DRAM`).
    Env(&'static str),
    /// The table's default ([`Setting::value`]).
    Default,
}

/// A setting's value, as text for its parser, and where it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The value as written (or as the table writes the default).
    pub value: String,
    /// Where it comes from.
    pub source: Source,
}

impl Resolved {
    /// Where the value comes from, as a message shows it: `--dram 64M`,
    /// `TIERMEM_DRAM=64M` or `the default`.
    pub fn describe(&self) -> String {
        match self.source {
            Source::Flag(flag) => format!("{flag} {}", self.value),
            Source::Env(var) => format!("{var}={}", self.value),
            Source::Default => "the default".to_string(),
        }
    }

    /// The value if the user gave it (by flag or variable), not the default.
    pub fn given(self) -> Option<String> {
        (self.source != Source::Default).then_some(self.value)
    }
}

/// The one reading of a setting: `flag` (the flag's value, if the command
/// has the flag and it was given), else the variable through `env`, else
/// the table's default; `None` when there is no fixed default
/// ([`Setting::value`] empty) and the user gave nothing.
pub fn resolve<F>(setting: &'static Setting, flag: Option<String>, env: &F) -> Option<Resolved>
where
    F: Fn(&str) -> Option<String> + ?Sized,
{
    given(setting, flag, env).or_else(|| {
        (!setting.value.is_empty()).then(|| Resolved {
            value: setting.value.to_string(),
            source: Source::Default,
        })
    })
}

/// Like [`resolve`] without the table's default: what the user gave, for
/// callers whose default comes from elsewhere (a command's own default, a
/// preset, or the core's resolution further on).
pub fn given<F>(setting: &'static Setting, flag: Option<String>, env: &F) -> Option<Resolved>
where
    F: Fn(&str) -> Option<String> + ?Sized,
{
    if let Some(value) = flag {
        return Some(Resolved {
            value,
            source: Source::Flag(setting.flag),
        });
    }
    env(setting.env).map(|value| Resolved {
        value,
        source: Source::Env(setting.env),
    })
}

/// [`resolve`] for the runtime, which has no flags: the value of the
/// variable `env` through `lookup`, else the table's default.
pub fn env_or_default<F>(env: &str, lookup: &F) -> Option<String>
where
    F: Fn(&str) -> Option<String> + ?Sized,
{
    resolve(known(env), None, lookup).map(|r| r.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn a_flag_beats_the_environment_which_beats_the_default() {
        let dram = known("TIERMEM_DRAM");
        let env = env_of(&[("TIERMEM_DRAM", "32M")]);
        let none = env_of(&[]);
        let r = resolve(dram, Some("64M".into()), &env).unwrap();
        assert_eq!(r.source, Source::Flag("--dram"));
        assert_eq!(
            (r.value.as_str(), r.describe()),
            ("64M", "--dram 64M".into())
        );
        let r = resolve(dram, None, &env).unwrap();
        assert_eq!(r.source, Source::Env("TIERMEM_DRAM"));
        assert_eq!(r.describe(), "TIERMEM_DRAM=32M");
        let r = resolve(dram, None, &none).unwrap();
        assert_eq!((r.value.as_str(), r.source), ("25%", Source::Default));
        assert_eq!(r.describe(), "the default");
        assert_eq!(r.given(), None);
        assert_eq!(given(dram, None, &none), None);
        assert_eq!(
            given(dram, None, &env).and_then(Resolved::given),
            Some("32M".to_string())
        );
    }

    #[test]
    fn a_setting_without_a_fixed_default_resolves_to_nothing() {
        let none = env_of(&[]);
        assert_eq!(env_or_default("TIERMEM_HANDLER_THREADS", &none), None);
        assert_eq!(env_or_default("TIERMEM_PREFETCH", &none), None);
        assert_eq!(env_or_default("TIERMEM_IO_DEPTH", &none), Some("32".into()));
        let env = env_of(&[("TIERMEM_PREFETCH", "2")]);
        let r = resolve(known("TIERMEM_PREFETCH"), None, &env).unwrap();
        assert_eq!(
            (r.value.as_str(), r.source),
            ("2", Source::Env("TIERMEM_PREFETCH"))
        );
    }

    #[test]
    #[should_panic(expected = "NOT_A_SETTING is not in")]
    fn an_unknown_variable_is_a_bug() {
        known("NOT_A_SETTING");
    }

    #[test]
    fn the_table_defaults_are_the_types_defaults() {
        use crate::compress::CompressSettings;
        use crate::error_policy::ErrorPolicy;
        use crate::io_config::IoSettings;
        let none = |_: &str| None;
        assert_eq!(
            IoSettings::from_lookup(&none).unwrap(),
            IoSettings::default()
        );
        assert_eq!(
            ErrorPolicy::from_lookup(&none).unwrap(),
            ErrorPolicy::default()
        );
        assert_eq!(
            CompressSettings::from_lookup(&none).unwrap(),
            CompressSettings::default()
        );
        assert_eq!(
            crate::Config::from_lookup(none).unwrap(),
            crate::Config::default()
        );
        // Each default on its own, written out, gives the same as no value.
        for s in SETTINGS
            .iter()
            .filter(|s| !s.value.is_empty() && s.read_by_library)
        {
            if s.env == "TIERMEM_MMAP_THRESHOLD" {
                // Read by the preload library, whose own test checks it.
                continue;
            }
            let one = |k: &str| (k == s.env).then(|| s.value.to_string());
            assert_eq!(
                crate::Config::from_lookup(one).unwrap(),
                crate::Config::default(),
                "{}={}",
                s.env,
                s.value
            );
        }
    }

    #[test]
    fn every_variable_appears_once() {
        for (i, s) in SETTINGS.iter().enumerate() {
            assert!(s.env.starts_with("TIERMEM_"), "{}", s.env);
            assert_eq!(setting(s.env), Some(&SETTINGS[i]), "{} twice", s.env);
        }
    }

    #[test]
    fn the_constants_of_each_group_are_in_the_table() {
        use crate::config::*;
        use crate::error_policy::*;
        use crate::io_config::*;
        for env in [
            ENV_DRAM,
            ENV_BACKING,
            ENV_BACKING_SIZE,
            ENV_PAGE_SIZE,
            ENV_POLICY,
            ENV_HANDLER_THREADS,
            ENV_WATERMARK_SCALE,
            ENV_FAULTS,
            ENV_CHECKSUMS,
            ENV_ENCRYPT,
            ENV_IO_DEADLINE,
            ENV_INJECT_FAULTS,
            ENV_IO_ENGINE,
            ENV_IO_DEPTH,
            ENV_IO_POLL,
            ENV_READAHEAD,
            ENV_PREDICT_WRITES,
            ENV_IDLE_SPIN,
            ENV_ASYNC_IO,
            crate::preload_library::ENV_LIB,
        ]
        .into_iter()
        .chain(crate::organization::ENV_VARS)
        {
            assert!(setting(env).is_some(), "{env} is not in SETTINGS");
        }
    }
}
