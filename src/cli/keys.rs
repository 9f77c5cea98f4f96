//! `marketplace keys generate`

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::trust::SigningKey;

#[derive(Debug, Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    command: KeysCommand,
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Make a new ed25519 signing key: FILE (PKCS#8 PEM, mode 0600) and FILE.pub.
    Generate {
        /// Where to write the private key; an existing file is never overwritten.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

pub fn run(args: KeysArgs) -> anyhow::Result<()> {
    match args.command {
        KeysCommand::Generate { out } => {
            let key = SigningKey::generate()?;
            let public = key.public();
            let mut pub_path = out.clone().into_os_string();
            pub_path.push(".pub");
            let pub_path = PathBuf::from(pub_path);
            if pub_path.exists() {
                anyhow::bail!(
                    "{} already exists; refusing to overwrite",
                    pub_path.display()
                );
            }
            key.save_new(&out)?;
            std::fs::write(&pub_path, public.to_json() + "\n")
                .with_context(|| format!("writing {}", pub_path.display()))?;
            println!("private key: {} (mode 0600; keep it secret)", out.display());
            println!("public key:  {}", pub_path.display());
            println!("key id:      {}", public.key_id());
            println!("ed25519:     {}", public.hex());
            Ok(())
        }
    }
}
