//! `leo completions bash|zsh|fish` and the man pages (`leo man --out DIR`, hidden, run by
//! `cargo xtask man`): both generated from the clap definitions, so they list exactly the
//! commands and flags this build takes.

use std::path::Path;

use anyhow::Context;

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Prints the completion script of `cmd` for `args.shell` on stdout.
pub fn print(mut cmd: clap::Command, args: &CompletionsArgs) -> anyhow::Result<()> {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let name = cmd.get_name().to_owned();
    // Into memory first: clap_complete panics on a write error (`leo completions bash | head`).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    let mut out = std::io::stdout().lock();
    std::io::Write::write_all(&mut out, &script)
        .and_then(|()| std::io::Write::flush(&mut out))
        .context("cannot write the script")
}

/// Writes the man pages of `cmd` and each of its visible subcommands into `out`.
pub fn man(cmd: clap::Command, out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    clap_mangen::generate_to(cmd, out)
        .with_context(|| format!("cannot write the man pages into {}", out.display()))?;
    println!("{}", out.display());
    Ok(())
}
