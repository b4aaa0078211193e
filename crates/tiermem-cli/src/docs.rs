//! Documentation generated from the CLI definition itself: `tiermem
//! completions bash|zsh|fish` prints a shell's completion script, and the
//! hidden `tiermem __man DIR` writes one man page per command, which
//! `make install` puts in `share/man/man1`. Both read the real clap
//! definition, so they cannot drift from the flags the binary accepts.

use std::path::Path;

use anyhow::Context;
use clap::{Args, ValueEnum};

/// The shells `make install` ships completions for.
#[derive(Clone, Copy, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

impl Shell {
    fn generator(self) -> clap_complete::Shell {
        match self {
            Shell::Bash => clap_complete::Shell::Bash,
            Shell::Zsh => clap_complete::Shell::Zsh,
            Shell::Fish => clap_complete::Shell::Fish,
        }
    }
}

/// Print the shell completion script for tiermem: bash, zsh or fish.
///
/// `make install` installs these where each shell finds them by itself:
/// share/bash-completion/completions/tiermem,
/// share/zsh/site-functions/_tiermem and
/// share/fish/vendor_completions.d/tiermem.fish. To try them in the
/// current bash without installing: source <(tiermem completions bash).
#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell to print the completion script for.
    #[arg(value_enum)]
    shell: Shell,
}

/// Prints the completion script of `args.shell` for `cli` on stdout.
pub fn completions(args: &CompletionsArgs, cli: clap::Command) -> anyhow::Result<i32> {
    let mut cli = without_hidden(&cli);
    let name = cli.get_name().to_owned();
    let mut script = Vec::new();
    clap_complete::generate(args.shell.generator(), &mut cli, name, &mut script);
    write_stdout(&script)?;
    Ok(0)
}

/// `cli` less its hidden subcommands (the internal workers, `__man`), which
/// clap_complete would offer at the prompt. clap cannot remove a
/// subcommand, so this is a new root with the visible ones; the root takes
/// no arguments of its own.
fn without_hidden(cli: &clap::Command) -> clap::Command {
    let visible: Vec<clap::Command> = cli
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let mut root = clap::Command::new("tiermem")
        .propagate_version(cli.is_propagate_version_set())
        .subcommands(visible);
    if let Some(about) = cli.get_about() {
        root = root.about(about.clone());
    }
    if cli.get_version().is_some() {
        root = root.version(env!("CARGO_PKG_VERSION"));
    }
    root
}

/// Writes `cli.1` and one `cli-SUBCOMMAND.1` per visible subcommand
/// (recursively) into `dir`, creating it if needed.
pub fn man_pages(dir: &Path, cli: clap::Command) -> anyhow::Result<i32> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the man page directory {}", dir.display()))?;
    // `help` is not a page of its own: `man tiermem-help` would only repeat tiermem(1).
    let mut cli = cli.disable_help_subcommand(true);
    // Building fills in each subcommand's display name, `tiermem-run`, the page's name.
    cli.build();
    let source = format!("tiermem {}", cli.get_version().unwrap_or_default());
    write_page(&cli, dir, &source)?;
    Ok(0)
}

/// Writes the page of `cmd`, then those of its visible subcommands.
fn write_page(cmd: &clap::Command, dir: &Path, source: &str) -> anyhow::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone())
        .source(source)
        .manual("tiermem manual");
    let path = dir.join(man.get_filename());
    let mut page = Vec::new();
    man.render(&mut page)
        .with_context(|| format!("rendering {}", path.display()))?;
    std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_page(sub, dir, source)?;
    }
    Ok(())
}

/// Writes `bytes` to stdout; a closed pipe (`| head`) is an error with context,
/// not a panic as `print!` would give.
fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .context("writing to stdout")
}
