use super::relay::RelayFlags;
use crate::config::Settings;

/// `outbox config`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Validate the configuration and print the effective values as TOML,
    /// each with its source (default, file, env, flag); passwords as `***`.
    /// Takes the same flags as `outbox relay`, to check a command line.
    Check(CheckArgs),
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    #[command(flatten)]
    flags: RelayFlags,
}

impl Args {
    /// The relay flags given to `config check`, as `(key, value)` pairs.
    pub fn flags(&self) -> Vec<(&'static str, String)> {
        match &self.action {
            Action::Check(c) => c.flags.pairs(),
        }
    }
}

/// Loading already validated everything (and failed with the list of
/// problems if anything was wrong); what is left is printing.
pub fn run(settings: &Settings, args: Args) -> anyhow::Result<()> {
    match args.action {
        Action::Check(_) => {
            match &settings.file {
                Some(f) => println!("# effective configuration (config file {})", f.display()),
                None => println!("# effective configuration (no config file)"),
            }
            print!("{}", settings.render());
            Ok(())
        }
    }
}
