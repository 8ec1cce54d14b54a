//! `starling token create|list|revoke`: the API tokens of an installation that requires them
//! (`starling node --admin-token-file`). A token is printed once, when it is made; the
//! installation keeps only its digest, its expiry (`--ttl`) and when it was last used.

use serde_json::json;

use super::output::{OutputFormat, ReportFormat, emit, to_json};
use crate::client::{Client, ServerArgs, block_on};

#[derive(clap::Args, Debug)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum TokenCommand {
    /// Make a token and print it (once).
    Create {
        /// The namespaces it acts in: `a,b`, or repeated; `*` for every namespace.
        #[arg(
            long = "tenant",
            required = true,
            value_name = "NAMESPACE",
            value_delimiter = ','
        )]
        tenants: Vec<String>,
        /// admin, writer, reader or agent.
        #[arg(long, default_value = "reader")]
        role: String,
        /// What it is for (shown by `starling token list`).
        #[arg(long, default_value = "")]
        description: String,
        /// How long it works (`720h`, `30d`); forever when unset. An expired token is refused
        /// and stays listed until revoked.
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Option<std::time::Duration>,
    },
    /// List the tokens (never their secrets).
    List,
    /// Revoke a token by id: the next call with it is refused.
    Revoke { id: String },
}

pub fn run(args: TokenArgs) -> anyhow::Result<()> {
    let format = ReportFormat::from_output(args.output, "starling token")?;
    let text = block_on(async {
        let client = Client::connect(&args.server).await?;
        execute(&client, args.command, format).await
    })?;
    emit(&text)
}

pub async fn execute(
    client: &Client,
    command: TokenCommand,
    format: ReportFormat,
) -> anyhow::Result<String> {
    let (text, json) = match command {
        TokenCommand::Create {
            tenants,
            role,
            description,
            ttl,
        } => {
            let ttl_seconds = ttl.map_or(0, |ttl| ttl.as_secs().max(1));
            let response = client
                .token_create(proto::TokenCreateRequest {
                    role: role.clone(),
                    tenants: tenants.clone(),
                    description,
                    ttl_seconds,
                })
                .await?;
            let lasts = match ttl {
                Some(ttl) => format!(", for {}", humantime::format_duration(ttl)),
                None => String::new(),
            };
            let text = format!(
                "token {} created ({role} of {}{lasts}). It is shown only now:\n{}\n",
                response.id,
                tenants.join(", "),
                response.token
            );
            let json = json!({"id": response.id, "token": response.token, "role": role, "tenants": tenants});
            (text, json)
        }
        TokenCommand::List => {
            let response = client.token_list().await?;
            let mut text = format!(
                "{:<14} {:<7} {:<30} {:<21} {:<29} {:<21} DESCRIPTION\n",
                "ID", "ROLE", "TENANTS", "CREATED", "EXPIRES", "LAST USED"
            );
            for token in &response.tokens {
                let expires = match (token.expires.as_str(), token.expired) {
                    ("", _) => "never".to_owned(),
                    (at, true) => format!("{at} (expired)"),
                    (at, false) => at.to_owned(),
                };
                let last_used = if token.last_used.is_empty() {
                    "never"
                } else {
                    token.last_used.as_str()
                };
                text.push_str(&format!(
                    "{:<14} {:<7} {:<30} {:<21} {:<29} {:<21} {}\n",
                    token.id,
                    token.role,
                    token.tenants.join(","),
                    token.created,
                    expires,
                    last_used,
                    token.description
                ));
            }
            let json = json!({"tokens": response.tokens.iter().map(|t| json!({
                "id": t.id, "role": t.role, "tenants": t.tenants,
                "description": t.description, "created": t.created,
                "expires": (!t.expires.is_empty()).then_some(&t.expires),
                "expired": t.expired,
                "lastUsed": (!t.last_used.is_empty()).then_some(&t.last_used),
            })).collect::<Vec<_>>()});
            (text, json)
        }
        TokenCommand::Revoke { id } => {
            let response = client
                .token_revoke(proto::TokenRevokeRequest { id: id.clone() })
                .await?;
            (
                format!("token {id} revoked\n"),
                json!({"id": id, "revoked": true, "revision": response.revision}),
            )
        }
    };
    match format {
        ReportFormat::Text => Ok(text),
        ReportFormat::Json => to_json(&json),
    }
}
