//! The `tcc` command line. Exit codes: 0 success, 1 user error (bad input, failed
//! check), 2 internal error (a bug in tcc — never a panic trace for user errors).

use clap::{Parser, Subcommand, ValueEnum};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tcc::diag::{self, Diagnostic};

#[derive(Parser)]
#[command(name = "tcc", version, about = "A compiler for tensor contractions and parallel plans", long_about = None)]
struct Cli {
    /// How to print diagnostics.
    #[arg(long, value_enum, default_value_t = ErrorFormat::Human, global = true)]
    error_format: ErrorFormat,
    /// Colour diagnostics (default: when stderr is a terminal).
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, global = true)]
    color: ColorChoice,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum ErrorFormat {
    /// Annotated source snippets.
    Human,
    /// One JSON object per line, for tools and editors.
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Subcommand)]
enum Command {
    /// Parse and check a program; report every error and warning.
    Check {
        /// The `.tc` source file.
        file: PathBuf,
    },
    /// Format a program canonically (in place, or to stdout with --stdout).
    Fmt {
        file: PathBuf,
        /// Do not write; exit 1 if the file is not formatted.
        #[arg(long)]
        check: bool,
        /// Print the formatted program instead of rewriting the file.
        #[arg(long, conflicts_with = "check")]
        stdout: bool,
    },
    /// Run a program and print each output's shape, norm and checksum.
    Run {
        file: PathBuf,
        /// Use the reference interpreter (f64, plain loops). Required for now:
        /// compiled execution arrives with the CPU back end.
        #[arg(long)]
        interp: bool,
        /// Seed for the random fill of inputs not given with --input.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Read an input tensor from a .npy file: NAME=path.npy (repeatable).
        #[arg(long = "input", value_name = "NAME=FILE")]
        inputs: Vec<String>,
        /// Write each output to DIR/NAME.npy.
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
        /// Also write the inputs used to DIR/NAME.npy (needs --output-dir).
        #[arg(long, requires = "output_dir")]
        save_inputs: bool,
        /// Run only this program or model (default: all of them).
        #[arg(long, value_name = "NAME")]
        program: Option<String>,
    },
}

/// How a command ended, mapped to the exit code.
enum Outcome {
    Ok,
    UserError,
}

struct Ctx {
    error_format: ErrorFormat,
    color: bool,
}

impl Ctx {
    fn report(&self, diags: &[Diagnostic], file: &str, src: &str) {
        if diags.is_empty() {
            return;
        }
        let text = match self.error_format {
            ErrorFormat::Human => diag::render(diags, file, src, self.color),
            ErrorFormat::Json => diag::render_json(diags, file, src),
        };
        let _ = std::io::stderr().write_all(text.as_bytes());
    }

    fn fail(&self, code: &str, message: &str, hint: Option<&str>) -> Outcome {
        match self.error_format {
            ErrorFormat::Human => {
                eprintln!("error[{code}]: {message}");
                if let Some(h) = hint {
                    eprintln!("  help: {h}");
                }
            }
            ErrorFormat::Json => {
                let v = serde_json::json!({"code": code, "severity": "error", "message": message, "hint": hint});
                eprintln!("{v}");
            }
        }
        Outcome::UserError
    }
}

fn read_source(ctx: &Ctx, path: &Path) -> Result<String, Outcome> {
    std::fs::read(path)
        .map_err(|e| ctx.fail("E0010", &format!("cannot read `{}`: {e}", path.display()), None))
        .and_then(|bytes| {
            String::from_utf8(bytes)
                .map_err(|_| ctx.fail("E0011", &format!("`{}` is not UTF-8 text", path.display()), Some("tcc sources are UTF-8")))
        })
}

fn file_stem(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "main".to_string())
}

/// Parses and checks `path`, reporting diagnostics; the HIR if there was no error.
fn front_end(ctx: &Ctx, path: &Path) -> Result<tcc::sema::hir::Hir, Outcome> {
    let src = read_source(ctx, path)?;
    let name = path.display().to_string();
    let (hir, diags) = tcc::compile(&src, &file_stem(path));
    ctx.report(&diags, &name, &src);
    hir.ok_or(Outcome::UserError)
}

fn run_command(ctx: &Ctx, command: Command) -> Outcome {
    match command {
        Command::Check { file } => match front_end(ctx, &file) {
            Ok(hir) => {
                eprintln!(
                    "{}: ok ({} tensors, {} units, {} statements)",
                    file.display(),
                    hir.tensors.len(),
                    hir.units.len(),
                    hir.units.iter().map(|u| u.stmts.len()).sum::<usize>()
                );
                Outcome::Ok
            }
            Err(o) => o,
        },
        Command::Fmt { file, check, stdout } => {
            let src = match read_source(ctx, &file) {
                Ok(s) => s,
                Err(o) => return o,
            };
            let formatted = match tcc::fmt::format_source(&src) {
                Ok(f) => f,
                Err(diags) => {
                    ctx.report(&diags, &file.display().to_string(), &src);
                    return Outcome::UserError;
                }
            };
            if check {
                if formatted == src {
                    Outcome::Ok
                } else {
                    eprintln!("{}: not formatted (run `tcc fmt {}`)", file.display(), file.display());
                    Outcome::UserError
                }
            } else if stdout {
                print!("{formatted}");
                Outcome::Ok
            } else if formatted != src {
                match std::fs::write(&file, formatted) {
                    Ok(()) => Outcome::Ok,
                    Err(e) => ctx.fail("E0012", &format!("cannot write `{}`: {e}", file.display()), None),
                }
            } else {
                Outcome::Ok
            }
        }
        Command::Run { file, interp, seed, inputs, output_dir, save_inputs, program } => {
            if !interp {
                return ctx.fail(
                    "E0013",
                    "compiled execution is not available yet",
                    Some("run with `--interp` to use the reference interpreter"),
                );
            }
            let mut parsed_inputs = Vec::new();
            for spec in &inputs {
                match spec.split_once('=') {
                    Some((name, path)) if !name.is_empty() && !path.is_empty() => {
                        parsed_inputs.push((name.to_string(), PathBuf::from(path)))
                    }
                    _ => {
                        return ctx.fail(
                            "E0701",
                            &format!("`--input {spec}` is not of the form NAME=FILE"),
                            Some("for example `--input A=a.npy`"),
                        )
                    }
                }
            }
            let hir = match front_end(ctx, &file) {
                Ok(h) => h,
                Err(o) => return o,
            };
            let opts = tcc::run::RunOptions { seed, inputs: parsed_inputs, output_dir, save_inputs, program };
            let stdout = std::io::stdout();
            let mut lock = stdout.lock();
            match tcc::run::run_interp(&hir, &opts, &mut lock) {
                Ok(()) => Outcome::Ok,
                Err(e) => ctx.fail(e.code, &e.message, e.hint.as_deref()),
            }
        }
    }
}

fn main() -> ExitCode {
    // Usage errors are user errors (exit 1); --help and --version succeed.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(1) } else { ExitCode::SUCCESS };
        }
    };
    let color = match cli.color {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    };
    let ctx = Ctx { error_format: cli.error_format, color };
    std::panic::set_hook(Box::new(|info| {
        eprintln!("internal compiler error: {info}");
        eprintln!("this is a bug in tcc; please report it with the input that caused it");
    }));
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_command(&ctx, cli.command))) {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::UserError) => ExitCode::from(1),
        Err(_) => ExitCode::from(2),
    }
}
