//! Resolving and checking the settings: flags over `TIERMEM_*` variables
//! over defaults (through `tiermem_core::settings`), with messages that name
//! where a bad value came from.

use tiermem_core::config::{
    ENV_BACKING, ENV_DRAM, ENV_HANDLER_THREADS, ENV_PAGE_SIZE, ENV_POLICY, MAX_PAGE_SIZE,
    MIN_BUDGET_PAGES, MIN_PAGE_SIZE,
};
use tiermem_core::error_policy::ENV_ENCRYPT;
use tiermem_core::settings::{self, Resolved, Source};
use tiermem_core::{parse_size, Config, Error as CoreError};
use tiermem_host::format::{exact_bytes, short_bytes};

use super::args::RunArgs;
use super::stop::Stop;

pub(super) const ENV_MMAP_THRESHOLD: &str = "TIERMEM_MMAP_THRESHOLD";

/// Below this a program spends its time paging its own working set in and out.
const MIN_RUN_BUDGET: u64 = 1 << 20;

/// The flag's value for each setting `tiermem run` has a flag for, if given.
fn flag_for(args: &RunArgs, var: &str) -> Option<String> {
    let value = match var {
        ENV_DRAM => &args.dram,
        ENV_BACKING => &args.backing,
        ENV_PAGE_SIZE => &args.page_size,
        ENV_POLICY => &args.policy,
        ENV_HANDLER_THREADS => &args.handler_threads,
        ENV_MMAP_THRESHOLD => &args.mmap_threshold,
        ENV_ENCRYPT if args.encrypt => return Some("on".to_string()),
        _ => return args.organization.flag_for(var).map(|(_, v)| v),
    };
    value.clone()
}

/// What the user gave for a setting: the flag, else the environment.
fn given(args: &RunArgs, env: &dyn Fn(&str) -> Option<String>, var: &str) -> Option<Resolved> {
    let setting = settings::setting(var)?;
    settings::given(setting, flag_for(args, var), env)
}

/// The configuration the program will run with: flags over `TIERMEM_*`
/// variables over defaults, with the core's checks and ours.
pub(super) fn resolve_config(
    args: &RunArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, Stop> {
    // The core fills in the defaults, from the same table.
    let get = |var: &str| given(args, env, var).map(|r| r.value);
    // A budget below our floor gets our message (with the floor), even when
    // the core would also refuse it for holding fewer than 16 pages.
    precheck_budget(args, env)?;
    let invalid_setting = |e| match e {
        CoreError::InvalidSetting {
            setting,
            value,
            expected,
        } => match given(args, env, setting).map(|r| r.source) {
            Some(Source::Flag(flag)) => Stop::new(
                1,
                format!("invalid {setting} '{value}' (from {flag}): {expected}"),
            ),
            _ => Stop::new(1, format!("invalid {setting} '{value}': {expected}")),
        },
        other => Stop::new(1, other.to_string()),
    };
    let config = Config::from_lookup(get)
        .and_then(|c| c.check_transparent().map(|()| c))
        .map_err(invalid_setting)?;
    let from =
        given(args, env, ENV_DRAM).map_or_else(|| "the default".to_string(), |r| r.describe());
    check_budget(config.dram_budget, config.page_size as u64, &from)?;
    Ok(config)
}

/// The smallest budget `tiermem run` accepts at this page size.
fn budget_floor(page_size: u64) -> u64 {
    MIN_RUN_BUDGET.max(page_size.saturating_mul(MIN_BUDGET_PAGES))
}

/// Refuses a budget below the floor; `from` says where it came from
/// ([`Resolved::describe`]).
fn check_budget(budget: u64, page_size: u64, from: &str) -> Result<(), Stop> {
    let floor = budget_floor(page_size);
    if budget >= floor {
        return Ok(());
    }
    Err(Stop::new(
        1,
        format!(
            "a DRAM budget of {} ({}) is too small for a program to make progress: \
             the minimum is {} (at least 1 MiB and {MIN_BUDGET_PAGES} pages of {}).\n\
             Fix: give --dram {} or more, e.g. --dram 256M (or set TIERMEM_DRAM).",
            exact_bytes(budget),
            from,
            exact_bytes(floor),
            exact_bytes(page_size),
            short_bytes(floor),
        ),
    ))
}

/// The budget check on the values as written, before the core sees them. A
/// value the core would reject for its syntax is left to the core.
fn precheck_budget(args: &RunArgs, env: &dyn Fn(&str) -> Option<String>) -> Result<(), Stop> {
    let Some(dram) = given(args, env, ENV_DRAM) else {
        return Ok(());
    };
    let Ok(budget) = parse_size(ENV_DRAM, &dram.value) else {
        return Ok(());
    };
    let page_size = match given(args, env, ENV_PAGE_SIZE) {
        None => MIN_PAGE_SIZE as u64,
        Some(p) => match parse_size(ENV_PAGE_SIZE, &p.value) {
            Ok(p) => p.resolve(),
            Err(_) => return Ok(()),
        },
    };
    let page_ok = page_size.is_power_of_two()
        && (MIN_PAGE_SIZE as u64..=MAX_PAGE_SIZE as u64).contains(&page_size);
    if !page_ok {
        return Ok(());
    }
    check_budget(budget.resolve(), page_size, &dram.describe())
}

/// The mmap threshold to give the program, if the flag was given; a value
/// from the environment is checked too (the program inherits it as is).
pub(super) fn resolve_mmap_threshold(
    args: &RunArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, Stop> {
    let Some(Resolved {
        value: text,
        source,
    }) = given(args, env, ENV_MMAP_THRESHOLD)
    else {
        return Ok(None);
    };
    if let Err(e) = parse_size(ENV_MMAP_THRESHOLD, &text) {
        let msg = match (e, source) {
            (
                CoreError::InvalidSetting {
                    setting,
                    value,
                    expected,
                },
                Source::Flag(flag),
            ) => format!("invalid {setting} '{value}' (from {flag}): {expected}"),
            (e, _) => e.to_string(),
        };
        return Err(Stop::new(1, msg));
    }
    Ok(matches!(source, Source::Flag(_)).then_some(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    use tiermem_core::organization::OrganizationArgs;

    fn args(flags: &[(&str, &str)]) -> RunArgs {
        let get = |name: &str| {
            flags
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        RunArgs {
            dram: get("dram"),
            backing: get("backing"),
            page_size: get("page-size"),
            policy: get("policy"),
            handler_threads: get("handler-threads"),
            mmap_threshold: get("mmap-threshold"),
            stats: false,
            stats_file: None,
            no_inherit: false,
            untiered_memfd: false,
            encrypt: false,
            cpus: None,
            organization: OrganizationArgs {
                preset: get("preset"),
                associativity: get("associativity"),
                prefetch: get("prefetch"),
                write_policy: get("write-policy"),
                inclusion: get("inclusion"),
            },
            command: vec!["true".into()],
        }
    }

    #[test]
    fn organization_flags_override_the_preset_and_the_environment() {
        use tiermem_core::{Inclusion, WritePolicy};
        let c = config(
            &[("preset", "memory-mode"), ("associativity", "4")],
            &[
                ("TIERMEM_WRITE_POLICY", "write-through"),
                ("TIERMEM_PREFETCH", "2"),
            ],
        )
        .unwrap();
        let o = c.organization;
        assert_eq!(o.associativity, 4, "the flag beats the preset");
        assert_eq!(o.prefetch, Some(2), "the variable beats the preset");
        assert_eq!(o.write_policy, WritePolicy::WriteThrough);
        assert_eq!(o.inclusion, Inclusion::Inclusive);
        let env = c.to_env();
        assert!(env.contains(&("TIERMEM_ASSOCIATIVITY", "4".to_string())));
        let e = config(&[("associativity", "many")], &[]).unwrap_err();
        assert!(
            e.message
                .contains("TIERMEM_ASSOCIATIVITY 'many' (from --associativity)"),
            "{}",
            e.message
        );
        let e = config(&[("inclusion", "exclusive"), ("write-policy", "wt")], &[]).unwrap_err();
        assert!(e.message.contains("inclusive"), "{}", e.message);
    }

    fn config(flags: &[(&str, &str)], env: &[(&str, &str)]) -> Result<Config, Stop> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve_config(&args(flags), &|k| env.get(k).cloned())
    }

    #[test]
    fn flags_override_environment() {
        let c = config(
            &[("dram", "64M"), ("policy", "fifo")],
            &[
                (ENV_DRAM, "32M"),
                (ENV_PAGE_SIZE, "8K"),
                (ENV_POLICY, "clock"),
            ],
        )
        .unwrap();
        assert_eq!(c.dram_budget, 64 << 20);
        assert_eq!(c.page_size, 8 << 10);
        assert_eq!(c.policy, tiermem_core::PolicyKind::Fifo);
    }

    #[test]
    fn bad_values_name_the_flag_and_the_form() {
        let e = config(&[("dram", "lots")], &[]).unwrap_err();
        assert_eq!(e.code, 1);
        assert!(
            e.message.contains("TIERMEM_DRAM 'lots' (from --dram)"),
            "{}",
            e.message
        );
        assert!(e.message.contains("256M"), "{}", e.message);
        let e = config(&[], &[(ENV_POLICY, "lru")]).unwrap_err();
        assert!(
            e.message.contains("invalid TIERMEM_POLICY 'lru'"),
            "{}",
            e.message
        );
        assert!(!e.message.contains("from --"), "{}", e.message);
    }

    #[test]
    fn budget_floor_is_one_mib_and_sixteen_pages() {
        for dram in ["8K", "512K", "1048575"] {
            let e = config(&[("dram", dram)], &[]).unwrap_err();
            assert!(e.message.contains("too small"), "{}", e.message);
            assert!(
                e.message.contains("1.00 MiB") || e.message.contains("1 MiB"),
                "{}",
                e.message
            );
            assert!(e.message.contains("--dram 1M"), "{}", e.message);
        }
        assert!(config(&[("dram", "1M")], &[]).is_ok());
        let e = config(&[("dram", "16M"), ("page-size", "2M")], &[]).unwrap_err();
        assert!(e.message.contains("--dram 32M"), "{}", e.message);
        let e = config(&[], &[(ENV_DRAM, "100K")]).unwrap_err();
        assert!(e.message.contains("TIERMEM_DRAM=100K"), "{}", e.message);
    }

    #[test]
    fn mmap_threshold_is_checked_and_passed_only_from_the_flag() {
        let none = |_: &str| None;
        assert_eq!(
            resolve_mmap_threshold(&args(&[("mmap-threshold", "64K")]), &none).unwrap(),
            Some("64K".to_string())
        );
        let e = resolve_mmap_threshold(&args(&[("mmap-threshold", "big")]), &none).unwrap_err();
        assert!(e
            .message
            .contains("TIERMEM_MMAP_THRESHOLD 'big' (from --mmap-threshold)"));
        let env = |k: &str| (k == ENV_MMAP_THRESHOLD).then(|| "1M".to_string());
        assert_eq!(resolve_mmap_threshold(&args(&[]), &env).unwrap(), None);
    }
}
