//! The `bulwark-agent` binary: parses the command line and runs it.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = bulwark_agent::cli::Cli::parse();
    bulwark_cli::output::init_logging(cli.log_format, &cli.log);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(bulwark_agent::cli::run(cli.command)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", bulwark_cli::output::failure_line(e.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}
