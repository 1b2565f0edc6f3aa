//! The `tcc` command line. Exit codes: 0 success, 1 user error (bad input, failed
//! check), 2 internal error (a bug in tcc — never a panic trace for user errors).

use clap::{Parser, Subcommand, ValueEnum};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tcc::diag::{self, Diagnostic};
use tcc::error::CommandError;

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

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Emit {
    /// Orders, flops and memory per statement (the default).
    Report,
    /// The checked program, as statements.
    Hir,
    /// The contraction graph of every term.
    Tir,
    /// The optimized program, as binary contractions.
    Opt,
    /// The fused loop nests with the size of every buffer.
    Lir,
    /// The optimized LLVM IR of the CPU back end.
    Llvm,
    /// The PTX of the GPU back end (NVPTX through LLVM), after its launch plan.
    Ptx,
}

/// What `build` and `run` generate code for.
#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum TargetKind {
    /// This machine's CPU (LLVM, JIT or shared library).
    Cpu,
    /// An NVIDIA GPU: PTX plus a launch plan, run through the CUDA driver (cudarc).
    Cuda,
}

/// How GPU plans compute binary contractions (`--gpu-gemm`).
#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum GpuGemm {
    /// The cheapest by the cost model (predicted times on an H200).
    Auto,
    /// cuBLAS strided-batched GEMM (operands copied where not strided matrices).
    Cublas,
    /// Generated tiled kernels (shared-memory tiles, register blocking).
    Tiled,
    /// Generated one-thread-per-output kernels.
    Naive,
}

/// How GPU plans are made (`--emit=ptx`, `--target cuda`).
#[derive(clap::Args, Clone, Copy)]
struct GpuArgs {
    /// GPU plans (`--emit=ptx`, `--target cuda`): how binary contractions are
    /// computed; `auto` picks the cheapest by predicted time.
    #[arg(long, value_enum, default_value_t = GpuGemm::Auto)]
    gpu_gemm: GpuGemm,
    /// GPU plans: f32 cuBLAS calls on TF32 tensor cores (inputs rounded to 10
    /// mantissa bits, f32 accumulation; `--check` then allows 5e-3 relative to
    /// the largest value). Generated f32 kernels stay exact f32.
    #[arg(long)]
    tf32: bool,
}

impl GpuArgs {
    fn options(self) -> tcc::codegen::nvptx::GpuOptions {
        use tcc::codegen::nvptx::GemmKind;
        let gemm = match self.gpu_gemm {
            GpuGemm::Auto => None,
            GpuGemm::Cublas => Some(GemmKind::Cublas),
            GpuGemm::Tiled => Some(GemmKind::Tiled),
            GpuGemm::Naive => Some(GemmKind::Naive),
        };
        tcc::codegen::nvptx::GpuOptions { gemm, tf32: self.tf32, ..Default::default() }
    }

    /// `--tf32` where no GPU plan is made: an error, not ignored.
    fn refuse_tf32(self, ctx: &Ctx, gpu_plan: bool, what: &str) -> Result<(), Outcome> {
        if self.tf32 && !gpu_plan {
            return Err(ctx.fail(
                "E0773",
                &format!("--tf32 applies to GPU plans only; {what} makes none"),
                Some("add --target cuda (tcc opt: --emit=ptx), or drop --tf32"),
            ));
        }
        Ok(())
    }
}

/// Loop fusion of compiled code (`--fuse`).
#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum FuseArg {
    /// Keep statements whole (GEMM-shaped steps stay GETT calls) unless the memory
    /// limit forces fusion or the CPU time model says fused is faster.
    Auto,
    /// Never fuse; with --mem-limit, an error if the temporaries do not fit.
    None,
    /// Fuse for the least temporary memory, whatever it costs in time.
    Max,
}

/// How compiled code fuses loops, and the memory its temporaries may take.
#[derive(clap::Args, Clone)]
struct FuseArgs {
    /// Loop fusion: `auto` (fastest by the CPU time model within --mem-limit),
    /// `none` or `max` (least temporary memory).
    #[arg(long, value_enum, default_value_t = FuseArg::Auto)]
    fuse: FuseArg,
    /// Bytes of temporaries allowed live at once (e.g. 2GiB, 512MB, 100000;
    /// default 2GiB). Given explicitly: when no fusion fits, products are sliced
    /// until the temporaries fit, and a program that still cannot fit is an error
    /// (E0725).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    mem_limit: Option<u64>,
    /// Largest intermediate of a reordered product (e.g. 64MiB): a product with a
    /// larger one is sliced — run once per value of the indices chosen, with
    /// intermediates that lack them — and `tcc opt` reports the indices, the slice
    /// count and the flops overhead. E0766 below one element (8 bytes). With
    /// `tcc run --ranks N` (or --backend mpi) the ranks split each sliced term's
    /// slices and all-reduce or all-gather its target.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_intermediate: Option<u64>,
    /// CPU kernel rates for --fuse auto (default: ~/.config/tcc/cpu.toml if it
    /// exists, written by `tcc tune --cpu`; else built-in rates).
    #[arg(long, value_name = "FILE")]
    cpu_rates: Option<PathBuf>,
    #[command(flatten)]
    order: OrderArgs,
}

/// The contraction-order search (`book/src/optimizer.md`, "Large networks").
#[derive(clap::Args, Clone)]
struct OrderArgs {
    /// Seconds the order search may spend on each product beyond the exact DP (more
    /// than 16 tensors): randomized greedy, graph bisection, subtree
    /// reconfiguration (default 1; 0: greedy only). E0728 unless a number from 0 to 86400.
    #[arg(long, value_name = "SECONDS", allow_hyphen_values = true)]
    search_time: Option<String>,
    /// What the order search minimizes: `flops`, `size` (the largest intermediate)
    /// or `combined` (flops + 10 flops per byte of intermediates written and read).
    /// E0729 for anything else.
    #[arg(long, value_name = "OBJECTIVE")]
    objective: Option<String>,
}

impl OrderArgs {
    /// The search options; E0728 / E0729 for bad values.
    fn options(&self, ctx: &Ctx) -> Result<tcc::tir::opmin::Options, Outcome> {
        let mut o = tcc::tir::opmin::Options { progress: true, ..Default::default() };
        if let Some(t) = &self.search_time {
            o.search_time = match t.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && (0.0..=86400.0).contains(&v) => v,
                _ => {
                    return Err(ctx.fail(
                        "E0728",
                        &format!("--search-time `{t}` is not a number of seconds between 0 and 86400"),
                        Some("e.g. --search-time 5 (0: greedy only beyond the exact search)"),
                    ))
                }
            };
        }
        if let Some(name) = &self.objective {
            o.by_time = false;
            o.objective = tcc::tir::opmin::Objective::from_name(name.trim()).ok_or_else(|| {
                ctx.fail(
                    "E0729",
                    &format!("unknown --objective `{name}`"),
                    Some("one of: flops, size (largest intermediate), combined (flops + memory traffic)"),
                )
            })?;
        }
        Ok(o)
    }
}

impl FuseArgs {
    fn mode(&self) -> tcc::lir::fusion::FuseMode {
        match self.fuse {
            FuseArg::Auto => tcc::lir::fusion::FuseMode::Auto,
            FuseArg::None => tcc::lir::fusion::FuseMode::None,
            FuseArg::Max => tcc::lir::fusion::FuseMode::Max,
        }
    }

    /// Whether any of these options was given (they only apply to compiled code).
    fn given(&self) -> bool {
        self.fuse != FuseArg::Auto
            || self.mem_limit.is_some()
            || self.cpu_rates.is_some()
            || self.max_intermediate.is_some()
    }

    /// The pipeline's fusion settings; E0726 for an unusable rates file.
    fn pipeline(&self, ctx: &Ctx) -> Result<tcc::pipeline::PipelineOptions, Outcome> {
        let rates = tcc::lir::cost::CpuRates::load(self.cpu_rates.as_deref())
            .map_err(|e| ctx.fail("E0726", &e, Some("write one with `tcc tune --cpu`")))?;
        let mut o = tcc::pipeline::PipelineOptions::with_mem_limit(Some(
            self.mem_limit.unwrap_or(tcc::codegen::llvm::DEFAULT_MEM_LIMIT),
        ));
        o.fusion.mode = self.mode();
        o.fusion.rates = rates;
        o.order = self.order.options(ctx)?;
        if let Some(b) = self.max_intermediate {
            if b < 8 {
                return Err(ctx.fail(
                    "E0766",
                    &format!("--max-intermediate of {b} bytes is less than one element (8 bytes in f64)"),
                    Some("slicing can shrink an intermediate to one element, no further"),
                ));
            }
        }
        o.order.slice_bytes = self.max_intermediate;
        Ok(o)
    }

    /// The CPU back end's options with these settings (checked as [`Self::check`] does).
    fn codegen(
        &self,
        ctx: &Ctx,
        hir: &tcc::sema::hir::Hir,
        units: &[tcc::sema::hir::UnitId],
        target_cpu: Option<String>,
        c_abi: bool,
        runtime_ranges: Vec<tcc::sema::hir::RangeId>,
    ) -> Result<tcc::codegen::llvm::Options, Outcome> {
        let p = self.check(ctx, hir, units)?;
        Ok(tcc::codegen::llvm::Options {
            target_cpu,
            c_abi,
            mem_limit: p.fusion.mem_limit,
            fuse: p.fusion.mode,
            rates: p.fusion.rates,
            gemm_min: None,
            parallel_min: None,
            runtime_ranges,
            order: p.order,
        })
    }

    /// E0725 when a limit given with --mem-limit cannot be met by the nests the
    /// back ends compile (with --fuse none: unfused), even by slicing; the
    /// settings otherwise (with the slicing that fits, if one was needed).
    fn check(
        &self,
        ctx: &Ctx,
        hir: &tcc::sema::hir::Hir,
        units: &[tcc::sema::hir::UnitId],
    ) -> Result<tcc::pipeline::PipelineOptions, Outcome> {
        let p = self.pipeline(ctx)?;
        if self.mem_limit.is_none() {
            return Ok(p);
        }
        match tcc::pipeline::fit_mem_limit(hir, units, &p) {
            Ok(p) => Ok(p),
            Err(over) => {
                let hint = match (self.fuse, over.sliced_to) {
                    (FuseArg::None, _) => "fusion shrinks temporaries: try --fuse auto or --fuse max".to_string(),
                    (_, Some(t)) => format!(
                        "the least memory found is {}, with products sliced to intermediates of at most {}",
                        tcc::plan::report::bytes(over.peak_bytes),
                        tcc::plan::report::bytes(t)
                    ),
                    _ => format!("the least memory any fusion needs is {}", tcc::plan::report::bytes(over.peak_bytes)),
                };
                Err(ctx.fail("E0725", &format!("{over} (--fuse {})", self.mode().name()), Some(&hint)))
            }
        }
    }
}

/// E0727: the fusion options were given where no CPU code is compiled.
const FUSION_APPLIES: &str =
    "--fuse, --mem-limit, --max-intermediate and --cpu-rates apply to code compiled for the CPU (tcc run without --interp or --target cuda, also on --ranks; tcc build without --mpi or --target cuda; tcc opt without --emit=ptx): the interpreter runs the statements as written, and the GPU back end does not slice";

/// E0734: the fusion options with a distributed run that does not compile.
const SLICED_RANKS: &str =
    "--fuse, --mem-limit, --max-intermediate and --cpu-rates with ranks run compiled code whose sliced terms the ranks share; --tiled and --plan run their own tiles and grids (interpreted blocks, no slicing), and --no-opt leaves nothing to slice";

/// The units `--program NAME` selects (all without it; none for an unknown name,
/// which the command reports itself).
fn selected_units(hir: &tcc::sema::hir::Hir, program: Option<&str>) -> Vec<tcc::sema::hir::UnitId> {
    match program {
        None => hir.units.ids().collect(),
        Some(name) => hir.unit_by_name(name).into_iter().collect(),
    }
}

/// Parses `2GiB`, `512MB`, `64k`, `100000` into bytes.
fn parse_pass(s: &str) -> Result<tcc::pipeline::Pass, String> {
    tcc::pipeline::Pass::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = tcc::pipeline::Pass::ALL.iter().map(|p| p.name()).collect();
        format!("unknown pass `{s}` (passes: {})", names.join(", "))
    })
}

/// A size that must name its unit (`80GB`, not `80`, which would be 80 bytes).
fn parse_size_with_unit(s: &str) -> Result<u64, String> {
    if s.trim().chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!("`{s}` has no unit: write it as {s}GB or {s}GiB (a bare number would be bytes)"));
    }
    parse_size(s)
}

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("`{s}` is not a size (try 2GiB, 512MB or a number of bytes)"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "ki" | "kib" => 1024.0,
        "mi" | "mib" => 1024f64.powi(2),
        "gi" | "gib" => 1024f64.powi(3),
        "ti" | "tib" => 1024f64.powi(4),
        other => return Err(format!("unknown size unit `{other}` (use B, KB, MB, GB, KiB, MiB, GiB)")),
    };
    let bytes = value * scale;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("`{s}` is out of range"));
    }
    Ok(bytes as u64)
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
        /// The `.tc` source file.
        file: PathBuf,
        /// Do not write; exit 1 if the file is not formatted.
        #[arg(long)]
        check: bool,
        /// Print the formatted program instead of rewriting the file.
        #[arg(long, conflicts_with = "check")]
        stdout: bool,
    },
    /// Optimize a program: contraction order, common sub-expressions, loop fusion.
    ///
    /// Prints, per statement, the chosen order and flops / peak memory before and
    /// after, and per program the peak temporary memory of the fused loop nests.
    Opt {
        /// The `.tc` source file.
        file: PathBuf,
        /// What to print instead of the report.
        #[arg(long, value_enum, default_value_t = Emit::Report)]
        emit: Emit,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        fusion: FuseArgs,
        /// Only this program or model.
        #[arg(long, value_name = "NAME")]
        program: Option<String>,
        /// LLVM CPU to generate code for (--emit=llvm); default: this machine's.
        #[arg(long, value_name = "CPU")]
        target_cpu: Option<String>,
        #[command(flatten)]
        gpu: GpuArgs,
        /// Print the IR after one pass of the back ends' sequence instead of the
        /// report: check, materialize, optimize, rematerialize or fuse (LIR).
        /// `TCC_LOG=passes` prints every pass to stderr from any command.
        #[arg(long, value_name = "PASS", value_parser = parse_pass, conflicts_with_all = ["emit", "json"])]
        emit_after: Option<tcc::pipeline::Pass>,
        /// Bind run-time ranges to sizes (`range O;`): NAME=SIZE, comma-separated or
        /// repeated (`--size O=40,V=400`).
        #[arg(long = "size", value_name = "NAME=SIZE")]
        size: Vec<String>,
        /// Sizes assumed for run-time ranges (`range O;`) in costs and plans:
        /// NAME=SIZE, comma-separated or repeated (default 32 each; reported).
        #[arg(long = "assume", value_name = "NAME=SIZE")]
        assume: Vec<String>,
    },
    /// Compile to a shared library with a C header and a Fortran module.
    ///
    /// `tcc build FILE -o libNAME.so` writes libNAME.so, NAME.h and NAME.f90 (module
    /// `NAME`) side by side: one C function `tcc_NAME_PROGRAM` per program or model.
    Build {
        /// The `.tc` source file.
        file: PathBuf,
        /// The shared library to write (e.g. libfoo.so).
        #[arg(short = 'o', long = "output", value_name = "LIB")]
        output: PathBuf,
        /// LLVM CPU to generate code for; default: this machine's (`native`).
        #[arg(long, value_name = "CPU")]
        target_cpu: Option<String>,
        #[command(flatten)]
        fusion: FuseArgs,
        /// Only this program or model.
        #[arg(long, value_name = "NAME")]
        program: Option<String>,
        /// The library's name, for its symbols (`tcc_NAME_...`), header and Fortran
        /// module; default: from `-o libNAME.so`. A C identifier.
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// `cuda`: write PTX (`-o NAME.ptx`) and its launch plan (`NAME.plan.json`),
        /// the host side that `tcc-gpu` and `tcc run --target cuda` execute, and a
        /// C shim (NAME.c + NAME.h). Complex programs are planned lowered to real
        /// parts; the shim takes `double _Complex*` / `float _Complex*`; bf16/f16
        /// tensors are stored in 16 bits on the device and passed as `uint16_t*`.
        #[arg(long, value_enum, default_value_t = TargetKind::Cpu)]
        target: TargetKind,
        #[command(flatten)]
        gpu: GpuArgs,
        /// Sizes of run-time ranges (`range O;`): NAME=SIZE, comma-separated or
        /// repeated. A range bound here is fixed in the library; the others become
        /// size arguments of its functions (`size_t size_O`, first). GPU libraries
        /// need every run-time range bound.
        #[arg(long = "size", value_name = "NAME=SIZE")]
        size: Vec<String>,
        /// Sizes assumed for run-time ranges (`range O;`): NAME=SIZE, the sizes the
        /// compiler's choices are made for (the code is correct for every size).
        /// Not with --mpi, which plans at open.
        #[arg(long = "assume", value_name = "NAME=SIZE")]
        assume: Vec<String>,
        /// A library for MPI programs: each program runs on tiles distributed over
        /// the caller's communicator (`tcc_NAME_PROG_open([size_t size_O, ...,]
        /// MPI_Comm)`: run-time sizes first; then the `tcc_dist_*` functions of the
        /// tcc_dist.h written next to it). Needs
        /// mpicc and libtcc_dist.so (`cargo build -p tcc-dist --features mpi`).
        #[arg(long)]
        mpi: bool,
        /// With --target cuda: write the PTX of tiled GPU runs (`tcc-gpu --tiled`:
        /// symmetry-packed, block-sparse tiles as batched GEMMs and moves) to -o
        /// NAME.ptx instead of a dense plan, after checking that every unit runs so.
        #[arg(long)]
        tiled: bool,
        /// With --target cuda (not --tiled): the C shim runs each program's
        /// independent steps on up to N CUDA streams, as `tcc run --target cuda
        /// --streams N` does; 1 runs every step in order on the null stream.
        /// Default 4.
        #[arg(long, value_name = "N", conflicts_with = "tiled")]
        streams: Option<usize>,
    },
    /// Plan distributed execution on P ranks: per contraction the processor grid,
    /// the mapping of its indices, the communication and its predicted cost,
    /// compared with communication lower bounds.
    Plan {
        /// The `.tc` source file.
        file: PathBuf,
        /// Number of ranks, or a sweep: 4,64,1024.
        #[arg(long, value_name = "P[,P...]", value_delimiter = ',', required = true)]
        procs: Vec<usize>,
        /// torus:8x8x16, fat-tree:bw=25GB/s,lat=2us, or a .toml file.
        #[arg(long, default_value = "fat-tree")]
        network: String,
        /// Memory per rank (e.g. 2GiB); mappings that need more are rejected.
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        mem_per_rank: Option<u64>,
        /// Print the plans as JSON.
        #[arg(long)]
        json: bool,
        /// Print the contraction tree with each step's mapping as Graphviz.
        #[arg(long, conflicts_with = "json")]
        dot: bool,
        /// Plan the naive baseline (1D grid, all-gathers) instead of searching.
        #[arg(long)]
        naive: bool,
        /// Only this program or model.
        #[arg(long, value_name = "NAME")]
        program: Option<String>,
        /// Sizes assumed for run-time ranges (`range O;`) in costs and plans:
        /// NAME=SIZE, comma-separated or repeated (default 32 each; reported).
        #[arg(long = "assume", value_name = "NAME=SIZE")]
        assume: Vec<String>,
        /// Forecast distributed tiled runs instead (`tcc run --tiled --ranks P`,
        /// MPI, `tcc build --mpi`): per rank the tiles held, flops and words sent
        /// from the plan the ranks compute, and the predicted time.
        #[arg(long, conflicts_with_all = ["dot", "naive", "network"])]
        tiled: bool,
        /// With --tiled: tile size of ranges that declare none (default: chosen by
        /// the time model for each rank count; the `tile` column).
        #[arg(long, value_name = "N", requires = "tiled")]
        tile: Option<usize>,
        /// With --tiled: worker threads of each rank.
        #[arg(long, value_name = "N", requires = "tiled", default_value_t = 1)]
        threads_per_rank: usize,
        /// With --tiled: tuning table whose calibration the time model uses
        /// (default: ~/.config/tcc/tuning.toml if it exists, else built-in values).
        #[arg(long, value_name = "FILE", requires = "tiled")]
        tuning: Option<PathBuf>,
        /// With --tiled: how tiles move between ranks, as `tcc run --exchange`.
        #[arg(long, value_enum, requires = "tiled", default_value_t = Exchange::Auto)]
        exchange: Exchange,
        /// Forecast sliced runs instead (`tcc run --ranks P --max-intermediate
        /// SIZE`): each sliced term's slices split among the ranks, its target
        /// all-reduced (a summed sliced index) or all-gathered; compute per rank,
        /// words and messages per rank, predicted time against one rank.
        #[arg(long, value_name = "SIZE", value_parser = parse_size, conflicts_with_all = ["tiled", "dot", "naive", "mem_per_rank"])]
        max_intermediate: Option<u64>,
    },
    /// Plan a `model` block on N devices: data (ZeRO 0-3, ZeRO++), tensor, sequence
    /// (Ulysses / ring) and expert parallelism, ranked by predicted step time with
    /// memory and communication per device (see book/src/models.md). With
    /// `--inference`, plan serving instead (tensor, pipeline and expert degrees, KV
    /// cache, prefill and decode time). Collectives cost NCCL-style latencies
    /// (--coll-lat, --intra-lat, the network's lat=) and bytes. With `--execute
    /// ulysses|expert`, run the layer sharded and check it instead.
    PlanModel {
        /// The `.tc` source file.
        file: PathBuf,
        /// Number of devices (GPUs).
        #[arg(long, value_name = "N")]
        devices: Option<usize>,
        /// Memory per device, with its unit (e.g. 80GB); plans that need more are ranked last.
        #[arg(long, value_name = "SIZE", value_parser = parse_size_with_unit)]
        mem_per_device: Option<u64>,
        /// The cross-node network and each device's compute rate: fat-tree:bw=..,lat=..,flops=..,
        /// torus:.., or a .toml file (flops= or gamma, or peak=..[,mfu=..], is required); for
        /// optimizer offload also pcie=.. (host link) and cpu-adam=.. (host Adam updates/s), for
        /// ZeRO++'s quantization and decode hbm=.. (device memory bandwidth), for ZeRO-Infinity
        /// nvme=.. (NVMe bandwidth per device) and host-mem=.. (host memory per device).
        #[arg(long, default_value = "fat-tree:bw=25GB/s,lat=5us,flops=150TF/s")]
        network: String,
        /// Devices per node (collectives within a node use --intra-bw).
        #[arg(long, default_value_t = 8)]
        gpus_per_node: usize,
        /// Intra-node bandwidth per device, with its unit.
        #[arg(long, default_value = "300GB/s")]
        intra_bw: String,
        /// Latency of one step of a collective inside a node, with its unit (NCCL's LL
        /// protocol on NVLink, rounded); across nodes a step costs the network's lat=.
        #[arg(long, default_value = "0.5us")]
        intra_lat: String,
        /// Launch latency of each collective, with its unit (NCCL's base latency, rounded).
        #[arg(long, default_value = "4us")]
        coll_lat: String,
        /// How many times the model block repeats (transformer layers).
        #[arg(long, default_value_t = 1)]
        layers: usize,
        /// Override a model dim: NAME=SIZE (repeatable), e.g. --dim seq=4096.
        #[arg(long = "dim", value_name = "NAME=SIZE")]
        dims: Vec<String>,
        /// How many plans to list.
        #[arg(long, default_value_t = 5)]
        top: usize,
        /// ZeRO++ options with ZeRO-3: qwz,hpz,qgz or all (default: search none and all).
        #[arg(long, value_name = "OPTS", conflicts_with = "execute")]
        zeropp: Option<String>,
        /// Micro-batches per step (gradient accumulation; default: search the divisors
        /// of the batch per data rank).
        #[arg(long, value_name = "M", conflicts_with = "execute")]
        micro_batches: Option<usize>,
        /// Samples per micro-batch per data rank, fixed: only plans whose per-replica batch
        /// it divides are searched (default: search every micro-batch size).
        #[arg(long, value_name = "N", conflicts_with = "execute")]
        micro_batch: Option<usize>,
        /// Activation recomputation: none, selective (the attention core; also what flash
        /// attention keeps), full (each layer's input only) or full-flash (full, the layers
        /// running flash attention: no s² scores while recomputed) (default: search all).
        #[arg(long, value_name = "KIND", conflicts_with = "execute")]
        recompute: Option<String>,
        /// Print the plans as JSON.
        #[arg(long)]
        json: bool,
        /// The vocabulary size: adds the token embedding and the output layer (untied, split
        /// over the tensor group along the vocabulary), their gradients and optimizer states,
        /// the output layer's flops and the logits (fp16 and fp32 for the loss) to the plan;
        /// with --inference, the tables' weights and each sequence's last logits.
        #[arg(long, value_name = "V", conflicts_with = "execute")]
        vocab: Option<usize>,
        /// Compressed gradient communication: 1bit-adam, 1bit-lamb or 01-adam (DeepSpeed's
        /// 1-bit optimizers: after a warm-up at full volume, 1 bit per element; plans run
        /// without ZeRO).
        #[arg(long, value_name = "KIND", conflicts_with_all = ["zeropp", "execute"])]
        compress: Option<String>,
        /// With --compress: the share of steps at full volume before compression [default: 0.15].
        #[arg(long, value_name = "F", requires = "compress")]
        warmup: Option<f64>,
        /// With --compress 01-adam: mean steps between 1-bit synchronizations after the
        /// warm-up (0/1 Adam's local steps) [default: 1].
        #[arg(long, value_name = "H", requires = "compress")]
        local_steps: Option<usize>,
        /// Plan serving instead of training (DeepSpeed-Inference style): tensor degree and
        /// replicas, KV-cache memory, prefill and per-token decode time, throughput and the
        /// largest batch that fits. The batch dim is the concurrent sequences, the seq dim
        /// the prompt length.
        #[arg(long, conflicts_with_all = ["emit", "execute", "zeropp", "micro_batches", "micro_batch", "recompute", "compress"])]
        inference: bool,
        /// With --inference: tokens generated per sequence [default: 256].
        #[arg(long, value_name = "N", requires = "inference")]
        generate: Option<usize>,
        /// With --inference: SwiftKV's share of the layers (0 ≤ F < 1) whose prefill
        /// computes only the KV cache (from one earlier layer's output).
        #[arg(long, value_name = "F", requires = "inference")]
        swiftkv: Option<f64>,
        /// Write the best plan as a DeepSpeed config (deepspeed), Megatron-LM
        /// arguments (megatron) or a PyTorch DeviceMesh/FSDP2 sketch (torch).
        #[arg(long, value_name = "FORMAT", conflicts_with_all = ["json", "execute", "top"])]
        emit: Option<String>,
        /// Only this model.
        #[arg(long, value_name = "NAME")]
        model: Option<String>,
        /// Run the model sharded (`ulysses` or `expert`) and compare with the
        /// interpreter and with the predicted all-to-all words.
        #[arg(long, value_name = "STYLE")]
        execute: Option<String>,
        /// In-process ranks for --execute (threads back end).
        #[arg(long, value_name = "N")]
        ranks: Option<usize>,
        /// Back end for --execute: threads, or mpi (under mpirun).
        #[arg(long, value_enum)]
        backend: Option<RunBackend>,
        /// Seed of the random inputs for --execute.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Run a program and print each output's shape, norm and checksum.
    ///
    /// Compiled runs use TCC_NUM_THREADS threads (default: every core) and run
    /// statements with no data dependence between them side by side
    /// (TCC_TASK_SETS=0 runs them one after another, each on every thread).
    /// TCC_GETT_COLUMNS=0 gives GEMM-shaped steps the former thread split, and
    /// TCC_GETT_EPILOGUE=0 runs an element-wise map of a GEMM-shaped step's result
    /// (`P = exp(S)`) as a pass of its own instead of inside the GETT, and
    /// TCC_GETT_INIT=0 adds a same-layout term (`V` in `W = V + T·U`) in a pass of
    /// its own instead of starting the GETT's output from it (all three for
    /// measuring; see the book's CPU chapter).
    Run {
        /// The `.tc` source file.
        file: PathBuf,
        /// Use the reference interpreter (f64, plain loops) instead of compiling
        /// with the CPU back end (JIT).
        #[arg(long)]
        interp: bool,
        /// Compiled runs: also run the interpreter and compare the outputs.
        #[arg(long, conflicts_with = "interp")]
        check: bool,
        /// Compiled runs: LLVM CPU to generate code for (default: this machine's).
        #[arg(long, value_name = "CPU", conflicts_with = "interp")]
        target_cpu: Option<String>,
        #[command(flatten)]
        fusion: FuseArgs,
        /// Compiled runs: run N times and report the fastest.
        #[arg(long, value_name = "N", default_value_t = 1, conflicts_with = "interp")]
        repeat: usize,
        /// Seed for the random fill of inputs not given with --input.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Read an input tensor from a .npy file: NAME=path.npy (repeatable). A bf16
        /// tensor takes a `<u2` array of its bit patterns, an f16 one `<f2`.
        #[arg(long = "input", value_name = "NAME=FILE")]
        inputs: Vec<String>,
        /// Sizes of run-time ranges (`range O;`): NAME=SIZE, comma-separated or
        /// repeated (`--size O=40,V=400`); sizes not given are read off --input arrays.
        #[arg(long = "size", value_name = "NAME=SIZE")]
        size: Vec<String>,
        /// Write each output to DIR/NAME.npy (distributed tiled runs: every rank
        /// writes its own tiles into the file; no rank holds an output whole).
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
        /// Also write the inputs used to DIR/NAME.npy (needs --output-dir; not with --tiled).
        #[arg(long, requires = "output_dir")]
        save_inputs: bool,
        /// Run only this program or model (default: all of them).
        #[arg(long, value_name = "NAME")]
        program: Option<String>,
        /// Run distributed over N in-process ranks (threads back end). With
        /// --max-intermediate or --mem-limit: compiled code on every rank, the
        /// slices of each sliced term split among the ranks.
        #[arg(long, value_name = "N")]
        ranks: Option<usize>,
        /// Distributed back end: `threads` (in-process, with --ranks) or `mpi`
        /// (under mpirun; needs a build with `--features mpi`).
        #[arg(long, value_enum)]
        backend: Option<RunBackend>,
        /// How ranks or a tiled run's threads claim tasks (default dynamic; elsewhere
        /// it is an error, and sliced runs on ranks deal slices in blocks and refuse it).
        #[arg(long, value_enum)]
        schedule: Option<Schedule>,
        /// Print words and messages sent per rank after the report (tiled runs:
        /// also the time model, the kernels by shape, and on ranks where each
        /// rank's seconds went).
        #[arg(long)]
        stats: bool,
        /// Tuning table written by `tcc tune` (default: ~/.config/tcc/tuning.toml if
        /// it exists, else built-in choices): the back end of each collective, and
        /// for --tiled the time model --stats prints.
        #[arg(long, value_name = "FILE")]
        tuning: Option<PathBuf>,
        /// Distribute the program as written, not the optimized one (results are
        /// then bitwise those of the interpreter).
        #[arg(long)]
        no_opt: bool,
        /// Execute the planner's distributed plan (grids, gathers, reductions,
        /// redistributions) instead of replicate-and-tile; `--stats` compares the
        /// measured words per rank with the plan's prediction.
        #[arg(long)]
        plan: bool,
        /// Network the plan is made for (with --plan): as `tcc plan --network`.
        #[arg(long, requires = "plan", default_value = "fat-tree")]
        network: String,
        /// Memory per rank the plan must fit (with --plan), e.g. 2GiB.
        #[arg(long, requires = "plan", value_name = "SIZE", value_parser = parse_size)]
        mem_per_rank: Option<u64>,
        /// Compiled runs: `cuda` runs on the GPU (exit 1 with `no CUDA device found`
        /// when there is none; bf16/f16 programs checked within 2e-2 / 3e-3).
        #[arg(long, value_enum, default_value_t = TargetKind::Cpu, conflicts_with = "interp")]
        target: TargetKind,
        #[command(flatten)]
        gpu: GpuArgs,
        /// `--target cuda` runs (not --tiled): CUDA streams for the unit's
        /// independent steps (a step waits, through events, only for earlier steps
        /// that write what it reads or read or write what it writes; a step
        /// predicted at 50 µs or more runs alone); 1 runs every step in order on
        /// one stream. Default 4.
        #[arg(long, value_name = "N", conflicts_with_all = ["interp", "tiled"])]
        streams: Option<usize>,
        /// Store tensors as tiles (only the unique, nonzero tiles of symmetric and
        /// block-sparse tensors) and run each statement as a task set of compiled
        /// tile kernels on this machine's threads (TCC_NUM_THREADS); with
        /// `--target cuda`, as batched GEMMs and tile moves on the GPU.
        #[arg(long, conflicts_with_all = ["interp", "target_cpu", "plan", "no_opt"])]
        tiled: bool,
        /// Tiled runs: tile size of ranges that do not declare one (`range V = 200 tile 32;`).
        /// Default: chosen by the time model for the run's ranks and threads (the
        /// report says which and the predicted time of each candidate); 50 on the GPU.
        #[arg(long, value_name = "N", requires = "tiled")]
        tile: Option<usize>,
        /// Distributed tiled runs: how tiles move between ranks. `one-sided`: each
        /// rank reads the remote tiles its work needs from the owners' windows
        /// (MPI RMA), and runs each piece as its tiles arrive; `collective`:
        /// all-to-all rounds per task set; `auto` (default): per task set, the one
        /// the time model predicts faster. In one-sided sets a rank out of work
        /// takes over other ranks' unstarted items (TCC_STEAL=off: never), and the
        /// items near the end of each rank's list are split into slabs of their
        /// tile's rows, none more than a fraction of the work left (TCC_SPLIT: a
        /// fraction in (0, 1], 0.25 by default, or `off`). Ranks that share memory
        /// (in-process, or MPI ranks of one node) read remote tiles in place instead
        /// of copying them (TCC_READ_IN_PLACE=off: copy).
        #[arg(long, value_enum, requires = "tiled")]
        exchange: Option<Exchange>,
    },
    /// Run the language server on stdin/stdout (for editors; see book/src/editors.md).
    Lsp,
    /// Measure each collective back end over message sizes, and the α-β-γ of tiled
    /// runs (all-to-all latency and bandwidth, tile kernel rates, first writes of fresh memory), and write a
    /// tuning table.
    Tune {
        /// In-process ranks to measure with (threads world).
        #[arg(long, default_value_t = 4)]
        ranks: usize,
        /// World to tune: `threads` (threads and shm back ends) or `mpi` (mpi and
        /// mpi-p2p; run under mpirun).
        #[arg(long, value_enum, default_value_t = RunBackend::Threads)]
        backend: RunBackend,
        /// Largest message size (default 64MiB).
        #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "64MiB")]
        max_bytes: u64,
        /// Where to write the table (default: ~/.config/tcc/tuning.toml, with --cpu
        /// ~/.config/tcc/cpu.toml); `-` for stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Instead: measure the CPU back end's kernel rates (GETT, loops, memory and
        /// cache bandwidth, GETT call overhead) that `--fuse auto` models time with.
        #[arg(long, conflicts_with_all = ["ranks", "backend", "max_bytes"])]
        cpu: bool,
    },
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum RunBackend {
    Threads,
    Mpi,
}

/// `--exchange` of distributed tiled runs.
#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Exchange {
    Auto,
    Collective,
    OneSided,
}

impl Exchange {
    fn mode(self) -> tcc::tiled::ExchangeMode {
        match self {
            Exchange::Auto => tcc::tiled::ExchangeMode::Auto,
            Exchange::Collective => tcc::tiled::ExchangeMode::Collective,
            Exchange::OneSided => tcc::tiled::ExchangeMode::OneSided,
        }
    }
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Schedule {
    Static,
    Dynamic,
}

impl Schedule {
    fn runtime(self) -> tcc_runtime::task::Schedule {
        match self {
            Schedule::Static => tcc_runtime::task::Schedule::Static,
            Schedule::Dynamic => tcc_runtime::task::Schedule::Dynamic,
        }
    }
}

/// The settings of `tcc run --tiled` (one process or ranks); E0760 for `--tile 0`.
fn tiled_run(
    ctx: &Ctx,
    tile: Option<usize>,
    schedule: Schedule,
    check: bool,
    stats: bool,
    tuning: Option<&std::path::Path>,
) -> Result<tcc::tiled::run::TiledRun, Outcome> {
    if tile == Some(0) {
        return Err(ctx.fail("E0760", "--tile must be at least 1", None));
    }
    let mut t = tcc::tiled::TiledOptions { schedule: schedule.runtime(), ..Default::default() };
    match tile {
        Some(n) => t.tile = n,
        None => t.auto_tile = true,
    }
    match tcc::tiled::placement::flops_per_word_from_env() {
        Ok(Some(x)) => t.flops_per_word = x,
        Ok(None) => {}
        Err(v) => {
            return Err(ctx.fail(
                "E0760",
                &format!("TCC_FLOPS_PER_WORD={v} is not a number ≥ 0"),
                Some("set it to the flops a rank does in the time it moves one word, such as 64"),
            ))
        }
    }
    if let Err(v) = tcc::tiled::placement::balance_from_env() {
        return Err(ctx.fail("E0760", &format!("TCC_BALANCE={v} is neither time nor flops"), None));
    }
    match tcc::tiled::steal::Steal::from_env() {
        Ok(Some(x)) => t.steal = x,
        Ok(None) => {}
        Err(v) => {
            return Err(ctx.fail("E0760", &format!("TCC_STEAL={v} is none of on, off, eager"), None));
        }
    }
    if let Ok(v) = std::env::var("TCC_PREFETCH_WORDS") {
        if v != "all" && v.trim().parse::<usize>().is_err() {
            return Err(ctx.fail("E0760", &format!("TCC_PREFETCH_WORDS={v} is neither a count nor `all`"), None));
        }
    }
    match tcc::tiled::exec::read_in_place_from_env() {
        Ok(Some(x)) => t.read_in_place = x,
        Ok(None) => {}
        Err(v) => return Err(ctx.fail("E0760", &format!("TCC_READ_IN_PLACE={v} is neither on nor off"), None)),
    }
    match tcc::tiled::placement::Split::from_env() {
        Ok(Some(x)) => t.split = x,
        Ok(None) => {}
        Err(v) => {
            return Err(ctx.fail(
                "E0760",
                &format!("TCC_SPLIT={v} is none of on, off, eager or a fraction in (0, 1]"),
                None,
            ));
        }
    }
    // The time model `--stats` prints: the calibration `tcc tune` measured, if any.
    if let Some(path) = tcc::exec::tuning_path(tuning) {
        match tcc::exec::read_tuning(Some(&path)) {
            Ok(table) => {
                if let Some(c) = table.as_ref().and_then(|t| t.calibration.as_ref()) {
                    t.model = tcc::tiled::model::TimeModel::from_calibration(c, &path.display().to_string());
                }
            }
            Err(e) => return Err(ctx.fail("E0722", &e, None)),
        }
    }
    Ok(tcc::tiled::run::TiledRun { tiled: t, check, stats, gpu: None })
}

/// "1 tensor", "3 tensors".
fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
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

    /// Prints a command's error (the one place that renders them): a user error.
    fn error(&self, e: &CommandError) -> Outcome {
        let (code, message, hint) = (e.code, &e.message, &e.hint);
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

    fn fail(&self, code: &'static str, message: &str, hint: Option<&str>) -> Outcome {
        self.error(&CommandError::new(code, message, hint.map(String::from)))
    }
}

fn read_source(ctx: &Ctx, path: &Path) -> Result<String, Outcome> {
    std::fs::read(path)
        .map_err(|e| ctx.fail("E0010", &format!("cannot read `{}`: {e}", path.display()), None))
        .and_then(|bytes| {
            String::from_utf8(bytes).map_err(|_| {
                ctx.fail("E0011", &format!("`{}` is not UTF-8 text", path.display()), Some("tcc sources are UTF-8"))
            })
        })
}

fn file_stem(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "main".to_string())
}

/// Element types that some commands and run modes have no path for yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unsupported {
    /// `c64`, `c128` (E0324): refused rather than run on their real parts.
    Complex,
    /// `bf16`, `f16` (E0327): refused rather than run in another precision.
    Half,
}

/// E0324 / E0327: `what` (a command or run mode) does not take programs with
/// tensors of the `kind` of element type.
fn refuse(ctx: &Ctx, hir: &tcc::sema::hir::Hir, kind: Unsupported, what: &str, hint: &str) -> Result<(), Outcome> {
    let (code, noun, found): (_, _, fn(tcc::sema::hir::ElemType) -> bool) = match kind {
        Unsupported::Complex => ("E0324", "complex", |e| e.is_complex()),
        Unsupported::Half => ("E0327", "16-bit", |e| e.is_half()),
    };
    match hir.tensors.iter().find(|t| found(t.elem)) {
        Some(t) => Err(ctx.fail(
            code,
            &format!("{what} does not support {noun} tensors yet (`{}` is {})", t.name, t.elem.name()),
            Some(hint),
        )),
        None => Ok(()),
    }
}

/// Parses and checks `path`, reporting diagnostics; the HIR if there was no error.
fn front_end(ctx: &Ctx, path: &Path) -> Result<tcc::sema::hir::Hir, Outcome> {
    front_end_as(ctx, path, &file_stem(path))
}

/// [`front_end`] with the file's top-level statements named `unit` (libraries call
/// them `main`, so that symbols do not follow the file's name).
fn front_end_as(ctx: &Ctx, path: &Path, unit: &str) -> Result<tcc::sema::hir::Hir, Outcome> {
    let src = read_source(ctx, path)?;
    let name = path.display().to_string();
    let (hir, diags) = tcc::pipeline::check(&src, unit, &tcc::pipeline::PipelineOptions::default());
    ctx.report(&diags, &name, &src);
    hir.ok_or(Outcome::UserError)
}

fn run_command(ctx: &Ctx, command: Command) -> Outcome {
    match command {
        Command::Lsp => match tcc::lsp::serve_stdio() {
            0 => Outcome::Ok,
            _ => Outcome::UserError,
        },
        Command::Tune { cpu: true, out, .. } => tune_cpu(ctx, out),
        Command::Tune { ranks, backend, max_bytes, out, .. } => tune_command(ctx, ranks, backend, max_bytes, out),
        c @ Command::Check { .. } => cmd_check(ctx, c),
        c @ Command::Fmt { .. } => cmd_fmt(ctx, c),
        c @ Command::Build { .. } => cmd_build(ctx, c),
        c @ Command::Opt { .. } => cmd_opt(ctx, c),
        c @ Command::Plan { .. } => cmd_plan(ctx, c),
        c @ Command::PlanModel { .. } => cmd_plan_model(ctx, c),
        c @ Command::Run { .. } => cmd_run(ctx, c),
    }
}

/// `tcc check`: parse and check, report diagnostics and a summary line.
fn cmd_check(ctx: &Ctx, command: Command) -> Outcome {
    let Command::Check { file } = command else { unreachable!("cmd_check is called for `Check`") };
    match front_end(ctx, &file) {
        Ok(hir) => {
            eprintln!(
                "{}: ok ({}, {}, {})",
                file.display(),
                count(hir.tensors.len(), "tensor"),
                count(hir.units.len(), "program"),
                count(hir.units.iter().map(|u| u.stmts.len()).sum::<usize>(), "statement")
            );
            Outcome::Ok
        }
        Err(o) => o,
    }
}

/// `tcc fmt`: canonical formatting, in place, to stdout or only checked.
fn cmd_fmt(ctx: &Ctx, command: Command) -> Outcome {
    let Command::Fmt { file, check, stdout } = command else { unreachable!("cmd_fmt is called for `Fmt`") };
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

/// `tcc build`: a shared library with its C header and Fortran module, or PTX.
fn cmd_build(ctx: &Ctx, command: Command) -> Outcome {
    let Command::Build {
        file,
        output,
        target_cpu,
        fusion,
        program,
        name,
        target,
        gpu,
        size,
        assume,
        mpi,
        tiled,
        streams,
    } = command
    else {
        unreachable!("cmd_build is called for `Build`")
    };
    if let Err(o) = gpu.refuse_tf32(ctx, target == TargetKind::Cuda, "a CPU library") {
        return o;
    }
    if let Some(n) = streams {
        if target != TargetKind::Cuda || mpi || n == 0 {
            return ctx.fail(
                "E0716",
                "--streams N applies to `--target cuda` builds (the C shim's streams), with N at least 1",
                Some("drop it, or build for the GPU: tcc build FILE --target cuda -o NAME.ptx --streams 4"),
            );
        }
    }
    let hir = match front_end_as(ctx, &file, "main") {
        Ok(h) => h,
        Err(o) => return o,
    };
    // `--mpi` libraries take complex and 16-bit programs as tiled sessions do
    // (complex parts, 16-bit values); `--target cuda` builds complex programs
    // lowered to real parts and keeps 16-bit tensors in 16 bits on the device.
    // `--size` fixes ranges (a library for those sizes); the run-time ranges left
    // become size arguments of the library's functions, `--assume` their assumed sizes.
    let hir = match tcc::sema::sizes::bind_and_assume(&hir, &size, &assume) {
        Ok(h) => h,
        Err(e) => return ctx.error(&e),
    };
    if fusion.given() && (mpi || target == TargetKind::Cuda) {
        return ctx.fail("E0727", FUSION_APPLIES, None);
    }
    if mpi {
        if let Err(e) = tcc::tiled::exec::check_block_writes(&hir) {
            return ctx.error(&e);
        }
        if hir.has_affine() && !hir.runtime_ranges().is_empty() {
            // Subscript bounds are proven at fixed sizes; the tile plan is made at open.
            return ctx.fail(
                "E0765",
                "an `--mpi` library reads affine subscripts only at sizes fixed when it is built, and this program has run-time ranges",
                Some("fix them with --size NAME=N, or build it without --mpi"),
            );
        }
        if target == TargetKind::Cuda || target_cpu.is_some() {
            return ctx.fail(
                "E0717",
                "--mpi libraries run on the CPU and compile their tile kernel for the machine they run on: --target cuda and --target-cpu do not apply",
                None,
            );
        }
        // The tile plan is made when the library is opened, at the sizes given
        // then (`--size` ones are written into the library): nothing here
        // would use assumed sizes.
        if !assume.is_empty() {
            return ctx.fail(
                "E0717",
                "--mpi libraries plan their tiles when opened, at the sizes given to the open function: --assume does not apply",
                Some("pass the sizes to the open function, or fix them with --size"),
            );
        }
        let source = match std::fs::read_to_string(&file) {
            Ok(s) => s,
            Err(e) => return ctx.fail("E0709", &format!("cannot read `{}`: {e}", file.display()), None),
        };
        return match tcc::codegen::mpi_lib::build_mpi_library(
            &hir,
            &source,
            program.as_deref(),
            name.as_deref(),
            &output,
        ) {
            Ok(report) => {
                eprint!("{report}");
                Outcome::Ok
            }
            Err(e) => ctx.error(&e),
        };
    }
    if tiled && (target != TargetKind::Cuda || mpi) {
        return ctx.fail(
            "E0716",
            "--tiled applies to --target cuda (CPU tiled runs need no build: `tcc run --tiled`)",
            None,
        );
    }
    if target == TargetKind::Cuda {
        if let Err(e) = tcc::sema::sizes::require_fixed_for_build(&hir) {
            return ctx.error(&e);
        }
        if tiled {
            return match tcc::codegen::cuda_build::build_tiled_ptx(&hir, program.as_deref(), &output) {
                Ok(report) => {
                    eprint!("{report}");
                    Outcome::Ok
                }
                Err(e) => ctx.error(&e),
            };
        }
        if name.is_some() {
            return ctx.fail("E0716", "--name applies to CPU libraries, not to --target cuda", None);
        }
        return match tcc::codegen::cuda_build::build_ptx(
            &hir,
            program.as_deref(),
            &output,
            &gpu.options(),
            &file.display().to_string(),
            streams.unwrap_or(tcc::codegen::nvptx::streams::DEFAULT_STREAMS),
        ) {
            Ok(report) => {
                eprint!("{report}");
                Outcome::Ok
            }
            Err(e) => ctx.error(&e),
        };
    }
    let units = selected_units(&hir, program.as_deref());
    let opts = match fusion.codegen(ctx, &hir, &units, target_cpu, true, hir.runtime_ranges()) {
        Ok(o) => o,
        Err(o) => return o,
    };
    let (program, name) = (program.as_deref(), name.as_deref());
    match tcc::codegen::cabi::build_library(&hir, &file_stem(&file), program, name, &opts, &output) {
        Ok(report) => {
            eprint!("{report}");
            Outcome::Ok
        }
        Err(e) => ctx.error(&e),
    }
}

/// `tcc opt`: the optimizer's report, or LLVM IR / PTX.
fn cmd_opt(ctx: &Ctx, command: Command) -> Outcome {
    let Command::Opt { file, emit, json, fusion, program, target_cpu, gpu, emit_after, size, assume } = command else {
        unreachable!("cmd_opt is called for `Opt`")
    };
    if let Err(o) = gpu.refuse_tf32(ctx, emit == Emit::Ptx, "`tcc opt` without --emit=ptx") {
        return o;
    }
    let hir = match front_end(ctx, &file) {
        Ok(h) => h,
        Err(o) => return o,
    };
    let hir = match sizes_and_note(ctx, &hir, &size, &assume, emit == Emit::Report && !json && emit_after.is_none()) {
        Ok(h) => h,
        Err(o) => return o,
    };
    // Complex tensors are optimized as the pairs of real tensors they are lowered to.
    let hir = tcc::tir::complex::lower(&hir).0;
    let units = match hir.select_units(program.as_deref()) {
        Ok(u) => u,
        Err(e) => return ctx.error(&e),
    };
    if emit == Emit::Ptx && fusion.max_intermediate.is_some() {
        return ctx.fail("E0727", "--max-intermediate applies to code compiled for the CPU, not to --emit=ptx", None);
    }
    let popts = match fusion.check(ctx, &hir, &units) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let mem_limit = fusion.mem_limit;
    if let Some(pass) = emit_after {
        let opts = popts.clone();
        print!("{}", tcc::pipeline::ir_after(&hir, &units, pass, &opts));
        return Outcome::Ok;
    }
    if emit == Emit::Ptx {
        // --mem-limit bounds the GPU plan's fused temporaries too.
        let gpu = tcc::codegen::nvptx::GpuOptions { mem_limit, ..gpu.options() };
        return match tcc::codegen::nvptx::ptx_for(&hir, &units, &gpu) {
            Ok((plan, ptx)) => {
                // The plan, and each contraction's predicted times, as PTX comments.
                for line in tcc::codegen::nvptx::describe(&plan).lines() {
                    println!("// {line}");
                }
                print!("{ptx}");
                Outcome::Ok
            }
            Err(e) => ctx.fail("E0712", &e.0, None),
        };
    }
    if emit == Emit::Llvm {
        // Run-time ranges left unbound are size arguments, as in `tcc build`.
        let opts = match fusion.codegen(ctx, &hir, &units, target_cpu, false, hir.runtime_ranges()) {
            Ok(o) => o,
            Err(o) => return o,
        };
        return match tcc::codegen::llvm::emit_llvm(&hir, &units, &opts) {
            Ok(ir) => {
                print!("{ir}");
                Outcome::Ok
            }
            Err(e) => ctx.fail("E0712", &e.0, None),
        };
    }
    print!("{}", opt_command(&hir, &units, emit, json, &popts));
    Outcome::Ok
}

/// `tcc plan`: distributed plans for every P of a sweep.
/// E0764: what the planned distributed executor and planner do not handle yet.
const SLICES_UNSUPPORTED: &str = "this program reads or writes slices of a union of ranges (`range P = O + V;`), which tiled and distributed runs and plans do not support yet";

/// E0765: likewise for affine subscripts (`I[n,c,y+r,x+s]`).
const AFFINE_UNSUPPORTED: &str = "this program reads tensors at affine subscripts (`I[y+r]`, `X[2*t+1]`), which distributed runs and plans without --tiled do not support yet";

fn cmd_plan(ctx: &Ctx, command: Command) -> Outcome {
    let Command::Plan {
        file,
        procs,
        network,
        mem_per_rank,
        json,
        dot,
        naive,
        program,
        assume,
        tiled,
        tile,
        threads_per_rank,
        tuning,
        exchange,
        max_intermediate,
    } = command
    else {
        unreachable!("cmd_plan is called for `Plan`")
    };
    let hir = match front_end(ctx, &file) {
        Ok(h) => h,
        Err(o) => return o,
    };
    let hir = match sizes_and_note(ctx, &hir, &[], &assume, !(json || dot)) {
        Ok(h) => h,
        Err(o) => return o,
    };
    // Complex tensors are planned as the pairs of real tensors they are lowered to.
    let hir = tcc::tir::complex::lower(&hir).0;
    if hir.has_affine() && !tiled {
        return ctx.fail("E0765", AFFINE_UNSUPPORTED, Some("plan it with --tiled, which reads affine subscripts"));
    }
    if hir.has_slices() && !tiled {
        return ctx.fail("E0764", SLICES_UNSUPPORTED, Some("plan it with --tiled, which reads slices"));
    }
    if let Some(bytes) = max_intermediate {
        if bytes < 8 {
            return ctx.fail(
                "E0766",
                &format!("--max-intermediate of {bytes} bytes is less than one element (8 bytes in f64)"),
                Some("slicing can shrink an intermediate to one element, no further"),
            );
        }
        return print_result(
            ctx,
            tcc::plan::sliced::plan_command(&hir, program.as_deref(), &procs, &network, bytes, json),
        );
    }
    if tiled {
        let t = TiledPlanArgs { tile, threads_per_rank, tuning, exchange };
        return plan_tiled(ctx, &hir, program.as_deref(), &procs, mem_per_rank, json, t);
    }
    use tcc::plan::{Format, Strategy};
    let format = if json {
        Format::Json
    } else if dot {
        Format::Dot
    } else {
        Format::Text
    };
    let strategy = if naive { Strategy::Naive } else { Strategy::Search };
    print_result(
        ctx,
        tcc::plan::plan_command(&hir, program.as_deref(), &procs, &network, mem_per_rank, strategy, format),
    )
}

/// The options of `tcc plan --tiled`.
struct TiledPlanArgs {
    tile: Option<usize>,
    threads_per_rank: usize,
    tuning: Option<PathBuf>,
    exchange: Exchange,
}

/// `tcc plan --tiled`: the forecast of distributed tiled runs.
fn plan_tiled(
    ctx: &Ctx,
    hir: &tcc::sema::hir::Hir,
    program: Option<&str>,
    procs: &[usize],
    mem_per_rank: Option<u64>,
    json: bool,
    args: TiledPlanArgs,
) -> Outcome {
    let TiledPlanArgs { tile, threads_per_rank, tuning, exchange } = args;
    let max = tcc_runtime::comm::threads::MAX_RANKS;
    if procs.is_empty() || procs.iter().any(|&p| p == 0 || p > max) {
        return ctx.fail(
            "E0802",
            &format!("--procs with --tiled must be between 1 and {max}"),
            Some("for example --procs 1,4,16"),
        );
    }
    if threads_per_rank == 0 {
        return ctx.fail("E0760", "--threads-per-rank must be at least 1", None);
    }
    let mut run = match tiled_run(ctx, tile, Schedule::Dynamic, false, false, tuning.as_deref()) {
        Ok(r) => r,
        Err(o) => return o,
    };
    run.tiled.exchange = exchange.mode();
    let units = match hir.select_units(program) {
        Ok(u) => u,
        Err(e) => return ctx.error(&e),
    };
    let p = tcc::tiled::plan::TiledPlan { tiled: run.tiled, threads_per_rank, mem_per_rank, json };
    print_result(ctx, tcc::tiled::plan::plan_tiled(hir, &units, procs, &p))
}

/// A command's text to stdout, or its error.
fn print_result(ctx: &Ctx, r: Result<String, tcc::error::CommandError>) -> Outcome {
    match r {
        Ok(out) => {
            print!("{out}");
            Outcome::Ok
        }
        Err(e) => ctx.error(&e),
    }
}

/// `--size` and `--assume` applied to the program, and the line saying which sizes
/// were assumed for run-time ranges (to stdout with a text report, else stderr).
fn sizes_and_note(
    ctx: &Ctx,
    hir: &tcc::sema::hir::Hir,
    size: &[String],
    assume: &[String],
    note_to_stdout: bool,
) -> Result<tcc::sema::hir::Hir, Outcome> {
    let hir = tcc::sema::sizes::bind_and_assume(hir, size, assume).map_err(|e| ctx.error(&e))?;
    if let Some(note) = tcc::sema::sizes::assumed_sizes_note(&hir) {
        if note_to_stdout {
            println!("{note}");
        } else {
            eprintln!("{note}");
        }
    }
    Ok(hir)
}

/// `tcc plan-model`: model-parallel plans, or a sharded run with `--execute`.
fn cmd_plan_model(ctx: &Ctx, command: Command) -> Outcome {
    let Command::PlanModel {
        file,
        devices,
        mem_per_device,
        network,
        gpus_per_node,
        intra_bw,
        intra_lat,
        coll_lat,
        layers,
        dims,
        top,
        zeropp,
        micro_batches,
        micro_batch,
        recompute,
        json,
        vocab,
        compress,
        warmup,
        local_steps,
        inference,
        generate,
        swiftkv,
        emit,
        model,
        execute,
        ranks,
        backend,
        seed,
    } = command
    else {
        unreachable!("cmd_plan_model is called for `PlanModel`")
    };
    let hir = match front_end(ctx, &file) {
        Ok(h) => h,
        Err(o) => return o,
    };
    let mpi = backend == Some(RunBackend::Mpi);
    let a = tcc::plan::model::CliArgs {
        model,
        devices,
        mem_per_device,
        network,
        gpus_per_node,
        intra_bw,
        intra_lat,
        coll_lat,
        layers,
        dims,
        top,
        zeropp,
        micro_batches,
        micro_batch,
        recompute,
        json,
        vocab,
        compress,
        warmup,
        local_steps,
        inference,
        generate,
        swiftkv,
        emit,
        execute,
        ranks,
        mpi,
        seed,
    };
    print_result(
        ctx,
        if a.execute.is_some() { tcc::exec::model::cli(&hir, &a) } else { tcc::plan::model::cli(&hir, &a) },
    )
}

/// `tcc run`: the interpreter, compiled code (CPU or GPU), or distributed ranks.
fn cmd_run(ctx: &Ctx, command: Command) -> Outcome {
    let Command::Run {
        file,
        interp,
        check,
        target_cpu,
        fusion,
        repeat,
        seed,
        inputs,
        size,
        output_dir,
        save_inputs,
        program,
        ranks,
        backend,
        schedule,
        stats,
        tuning,
        no_opt,
        plan,
        network,
        mem_per_rank,
        target,
        gpu,
        streams,
        tiled,
        tile,
        exchange,
    } = command
    else {
        unreachable!("cmd_run is called for `Run`")
    };
    if let Some(n) = streams {
        if target != TargetKind::Cuda || n == 0 {
            return ctx.fail(
                "E0716",
                "--streams N applies to `--target cuda` runs, with N at least 1",
                Some("drop it, or run on the GPU: tcc run FILE --target cuda --streams 4"),
            );
        }
    }
    let streams = streams.unwrap_or(tcc::codegen::nvptx::streams::DEFAULT_STREAMS);
    let distributed = ranks.is_some() || backend.is_some() || plan;
    let claims_tasks = tiled || (distributed && !plan);
    if let Err(e) =
        check_run_options(distributed, interp, check, repeat, target_cpu.is_some(), schedule.is_some() && !claims_tasks)
    {
        return ctx.error(&e);
    }
    if fusion.given() && (interp || target == TargetKind::Cuda) {
        return ctx.fail("E0727", FUSION_APPLIES, None);
    }
    if let Err(o) = gpu.refuse_tf32(ctx, target == TargetKind::Cuda && !interp, "a run without --target cuda") {
        return o;
    }
    if fusion.given() && (tiled || plan || no_opt) {
        return ctx.fail("E0734", SLICED_RANKS, Some("run it with --ranks N (or --backend mpi) alone"));
    }
    if exchange.is_some() && !distributed {
        return ctx.fail(
            "E0760",
            "--exchange applies to distributed tiled runs (--ranks N or --backend mpi): one process moves no tiles",
            None,
        );
    }
    // The table is read by distributed runs over collectives (their back ends) and
    // by `--tiled --stats` (its time model); anywhere else it would be ignored.
    // Distributed tiled runs choose their exchange with the time model.
    let reads_tuning = (distributed && !plan) || (tiled && stats);
    if tuning.is_some() && !reads_tuning {
        return ctx.fail(
            "E0756",
            "--tuning applies to distributed runs (--ranks, --backend; not --plan) and to --tiled --stats",
            Some("add --stats to see the time model of a tiled run, or drop --tuning"),
        );
    }
    if target == TargetKind::Cuda {
        if distributed {
            return ctx.fail(
                "E0731",
                "`--target cuda` runs on one GPU; it does not combine with --ranks, --backend or --plan",
                None,
            );
        }
        if let Err(why) = tcc::codegen::cuda::device() {
            return ctx.fail("E0730", tcc::codegen::cuda::NO_DEVICE, Some(&why));
        }
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
    let hir = match tcc::run::sizes::bind_for_run(&hir, &size, &parsed_inputs) {
        Ok(h) => h,
        Err(e) => return ctx.error(&e),
    };
    if !tiled && distributed && hir.has_slices() {
        return ctx.fail(
            "E0764",
            SLICES_UNSUPPORTED,
            Some("run it with --tiled, which reads slices, or without --ranks, --backend and --plan"),
        );
    }
    if !tiled && distributed && hir.has_affine() {
        return ctx.fail(
            "E0765",
            AFFINE_UNSUPPORTED,
            Some("run it with --tiled, which reads affine subscripts, or without --ranks, --backend and --plan"),
        );
    }
    let opts = tcc::run::RunOptions { seed, inputs: parsed_inputs, output_dir, save_inputs, program };
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    if tcc::sema::half::has_half(&hir) {
        // Tiled runs (one process and ranks) read, round and write 16-bit tensors
        // as their type and compute in f32, as the JIT does.
        let what = if tiled {
            ""
        } else if distributed {
            "a distributed `tcc run` (--ranks, --backend, --plan)"
        } else {
            ""
        };
        if !what.is_empty() {
            if let Err(o) =
                refuse(ctx, &hir, Unsupported::Half, what, "run it on the CPU (JIT or --interp) without those options")
            {
                return o;
            }
        }
    }
    let complex = tcc::sema::complex::has_complex(&hir);
    if complex && !(tiled && (distributed || target == TargetKind::Cuda)) {
        // Tiled runs take the (re, im) parts; distributed and GPU tiled runs go on below.
        if distributed && !tiled {
            if let Err(o) = refuse(
                ctx,
                &hir,
                Unsupported::Complex,
                "a distributed `tcc run` without --tiled (--ranks, --backend, --plan)",
                "add --tiled: distributed tiled runs take complex tensors",
            ) {
                return o;
            }
        }
        let result = if tiled {
            if repeat != 1 {
                return ctx.fail("E0760", "--tiled runs on the CPU once: --repeat applies with --target cuda", None);
            }
            match tiled_run(ctx, tile, schedule.unwrap_or(Schedule::Dynamic), check, stats, tuning.as_deref()) {
                Ok(r) => {
                    tcc::run::complex::run_complex(&hir, &opts, tcc::run::complex::ComplexExec::Tiled(&r), &mut lock)
                }
                Err(o) => return o,
            }
        } else if interp {
            tcc::run::complex::run_complex(&hir, &opts, tcc::run::complex::ComplexExec::Interp, &mut lock)
        } else if target == TargetKind::Cuda {
            let c = tcc::codegen::cuda::CudaRun { check, repeat, streams, plan: gpu.options() };
            tcc::run::complex::run_complex(&hir, &opts, tcc::run::complex::ComplexExec::Cuda(&c), &mut lock)
        } else {
            let low = tcc::tir::complex::lower(&hir).0;
            let units = selected_units(&low, opts.program.as_deref());
            let codegen = match fusion.codegen(ctx, &low, &units, target_cpu, false, Vec::new()) {
                Ok(o) => o,
                Err(o) => return o,
            };
            let c = tcc::run::compiled::CompiledRun { codegen, check, repeat };
            tcc::run::complex::run_complex(&hir, &opts, tcc::run::complex::ComplexExec::Compiled(&c), &mut lock)
        };
        return match result {
            Ok(()) => Outcome::Ok,
            Err(e) => ctx.error(&e),
        };
    }
    let result = if tiled && distributed {
        let mut r = match tiled_run(ctx, tile, schedule.unwrap_or(Schedule::Dynamic), check, stats, tuning.as_deref()) {
            Ok(r) => r,
            Err(o) => return o,
        };
        r.tiled.exchange = exchange.unwrap_or(Exchange::Auto).mode();
        let mpi = backend == Some(RunBackend::Mpi);
        tcc::tiled::run::run_tiled_distributed(&hir, &opts, &r, ranks.unwrap_or(1), mpi, &mut lock)
    } else if plan {
        let p = tcc::exec::planned::PlanRunOptions { ranks: ranks.unwrap_or(1), network, mem_per_rank, stats };
        if backend == Some(RunBackend::Mpi) {
            tcc::exec::planned::run_mpi(&hir, &opts, &p, &mut lock)
        } else {
            tcc::exec::planned::run_threads(&hir, &opts, &p, &mut lock)
        }
    } else if distributed {
        let tuning = match tcc::exec::read_tuning(tuning.as_deref()) {
            Ok(t) => t,
            Err(e) => return ctx.fail("E0722", &e, None),
        };
        // With the fusion options, the ranks share the slices of compiled sliced terms.
        let compiled = if fusion.given() {
            if schedule.is_some() {
                return ctx.fail(
                    "E0734",
                    "--schedule with sliced runs on ranks: each rank runs one block of every sliced term's slices",
                    Some("drop --schedule"),
                );
            }
            // Every rank (process) must compile the same slicing: the order search
            // is the deterministic one, also where --mem-limit picks the slicing.
            if fusion.order.search_time.as_deref().is_some_and(|t| t.trim().parse::<f64>() != Ok(0.0)) {
                return ctx.fail(
                    "E0734",
                    "--search-time with sliced runs on ranks: every rank must compile the same slicing, so the order search on ranks is the deterministic one (exact search and seeded greedy restarts)",
                    Some("drop --search-time (or pass 0); `tcc opt` shows what a longer search would find"),
                );
            }
            let mut fusion = fusion.clone();
            fusion.order.search_time = Some("0".into());
            let units = selected_units(&hir, opts.program.as_deref());
            match fusion.codegen(ctx, &hir, &units, None, false, Vec::new()) {
                Ok(o) => Some(o),
                Err(o) => return o,
            }
        } else {
            None
        };
        let schedule = schedule.unwrap_or(Schedule::Dynamic).runtime();
        let d =
            tcc::exec::DistOptions { ranks: ranks.unwrap_or(1), schedule, stats, tuning, optimize: !no_opt, compiled };
        if backend == Some(RunBackend::Mpi) {
            tcc::exec::run_mpi(&hir, &opts, &d, &mut lock)
        } else {
            tcc::exec::run_threads(&hir, &opts, &d, &mut lock)
        }
    } else if tiled {
        let cuda = target == TargetKind::Cuda;
        if !cuda && repeat != 1 {
            return ctx.fail("E0760", "--tiled runs on the CPU once: --repeat applies with --target cuda", None);
        }
        if cuda && (stats || schedule.is_some() || tuning.is_some()) {
            return ctx.fail(
                "E0760",
                "--stats, --schedule and --tuning describe the CPU's threads: not with --tiled --target cuda",
                None,
            );
        }
        // On the GPU, ranges without a declared tile get the GPU's default size.
        let tile = if cuda { Some(tile.unwrap_or(tcc::tiled::device::GPU_TILE)) } else { tile };
        let mut r = match tiled_run(ctx, tile, schedule.unwrap_or(Schedule::Dynamic), check, stats, tuning.as_deref()) {
            Ok(r) => r,
            Err(o) => return o,
        };
        if cuda {
            match tcc::codegen::nvptx::tile_moves::ptx() {
                Ok(ptx) => r.gpu = Some(tcc::tiled::run::GpuTiled { ptx, repeat }),
                Err(e) => return ctx.fail("E0712", &e.0, None),
            }
        }
        if complex {
            // The (re, im) parts on the GPU's tiles, checked against the complex interpreter.
            tcc::run::complex::run_complex(&hir, &opts, tcc::run::complex::ComplexExec::Tiled(&r), &mut lock)
        } else {
            tcc::tiled::run::run_tiled(&hir, &opts, &r, &mut lock)
        }
    } else if interp {
        tcc::run::run_interp(&hir, &opts, &mut lock)
    } else if target == TargetKind::Cuda {
        let c = tcc::codegen::cuda::CudaRun { check, repeat, streams, plan: gpu.options() };
        tcc::codegen::cuda::run_cuda(&hir, &opts, &c, &mut lock)
    } else {
        let units = selected_units(&hir, opts.program.as_deref());
        let codegen = match fusion.codegen(ctx, &hir, &units, target_cpu, false, Vec::new()) {
            Ok(o) => o,
            Err(o) => return o,
        };
        let c = tcc::run::compiled::CompiledRun { codegen, check, repeat };
        tcc::run::compiled::run_compiled(&hir, &opts, &c, &mut lock)
    };
    match result {
        Ok(()) => Outcome::Ok,
        Err(e) => ctx.error(&e),
    }
}

/// Options of `tcc run` that would otherwise be ignored or meaningless: E0755
/// `--repeat 0`; E0756 `--interp`, `--check`, `--repeat` or `--target-cpu` with a
/// distributed run (ranks run their own executor); E0757 a `TCC_NUM_THREADS` that
/// is not a positive integer (generated libraries ignore such a value instead);
/// E0660 a `TCC_TASK_SETS` other than `0`, `1`, `off`, `on`; E0767 a
/// `TCC_GETT_COLUMNS` other than `0`, `1`; E0329 a `TCC_GETT_EPILOGUE` other
/// than `0`, `1`; E0768 a `TCC_GETT_INIT` other than `0`, `1`. Also E0756 for
/// `--schedule` where no tasks are claimed (`unclaimed_schedule`: neither
/// `--tiled` nor ranks without `--plan`).
fn check_run_options(
    distributed: bool,
    interp: bool,
    check: bool,
    repeat: usize,
    target_cpu: bool,
    unclaimed_schedule: bool,
) -> Result<(), CommandError> {
    if unclaimed_schedule {
        return Err(CommandError::new(
            "E0756",
            "--schedule does not apply here: it says how ranks or tiled runs claim tasks",
            Some("use it with --tiled or --ranks N (without --plan), or drop it".into()),
        ));
    }
    if repeat == 0 {
        return Err(CommandError::new(
            "E0755",
            "--repeat must be at least 1",
            Some("--repeat N runs N times and reports the fastest".into()),
        ));
    }
    if distributed {
        let ignored: Vec<&str> =
            [(interp, "--interp"), (check, "--check"), (repeat != 1, "--repeat"), (target_cpu, "--target-cpu")]
                .into_iter()
                .filter_map(|(on, name)| on.then_some(name))
                .collect();
        if !ignored.is_empty() {
            return Err(CommandError::new(
                "E0756",
                format!("{} does not apply to distributed runs (--ranks, --backend, --plan)", ignored.join(", ")),
                Some("a distributed run prints the same report as `tcc run --interp`: compare the two, or run without --ranks".into()),
            ));
        }
    }
    if let Some(v) = std::env::var_os("TCC_NUM_THREADS") {
        let ok = v.to_str().and_then(|s| s.trim().parse::<usize>().ok()).is_some_and(|n| n >= 1);
        if !ok {
            return Err(CommandError::new(
                "E0757",
                format!("TCC_NUM_THREADS={} is not a positive number of threads", v.to_string_lossy()),
                Some("set it to a number such as 4, or unset it to use every core".into()),
            ));
        }
    }
    if let Some(v) = std::env::var_os("TCC_TASK_SETS") {
        if !matches!(v.to_str().map(str::trim), Some("0" | "1" | "off" | "on")) {
            return Err(CommandError::new(
                "E0660",
                format!("TCC_TASK_SETS={} is neither on nor off", v.to_string_lossy()),
                Some("set it to 0 or off to run independent statements one after another, 1 or on (the default) to overlap them".into()),
            ));
        }
    }
    // Measuring switches of the CPU back end: `0` or `1`, nothing else.
    let switches = [
        ("TCC_GETT_COLUMNS", "E0767", "set it to 0 for the GETT's former thread split (columns only with fewer row blocks than threads), 1 (the default) for the current one"),
        ("TCC_GETT_EPILOGUE", "E0329", "set it to 0 to run maps such as `P = exp(S)` as a pass of their own after the GETT of `S`, 1 (the default) to apply them inside it"),
        ("TCC_GETT_INIT", "E0768", "set it to 0 to add `V` of `W = V + T·U` in a pass of its own after the GETT, 1 (the default) to start the GETT's output from it"),
    ];
    for (name, code, hint) in switches {
        if let Some(v) = std::env::var_os(name) {
            if !matches!(v.to_str().map(str::trim), Some("0" | "1")) {
                return Err(CommandError::new(
                    code,
                    format!("{name}={} is neither 0 nor 1", v.to_string_lossy()),
                    Some(hint.into()),
                ));
            }
        }
    }
    Ok(())
}

/// `tcc tune`: measure, then write the table.
fn tune_command(ctx: &Ctx, ranks: usize, backend: RunBackend, max_bytes: u64, out: Option<PathBuf>) -> Outcome {
    match tcc::exec::tune(ranks, backend == RunBackend::Mpi, max_bytes, out.as_deref()) {
        Ok(msg) => {
            if !msg.is_empty() {
                eprintln!("{msg}");
            }
            Outcome::Ok
        }
        Err(e) => ctx.error(&e),
    }
}

/// `tcc tune --cpu`: the CPU rates file.
fn tune_cpu(ctx: &Ctx, out: Option<PathBuf>) -> Outcome {
    let rates = match tcc::codegen::llvm::rates::measure(None) {
        Ok(r) => r,
        Err(e) => return ctx.fail("E0723", &format!("cannot measure the CPU rates: {}", e.0), None),
    };
    eprintln!(
        "tune: GETT {:.1} GFLOP/s, loops {:.1} GFLOP/s, memory {:.1} GB/s, cache {:.1} GB/s, GETT call {:.1} us",
        rates.gett_flops / 1e9,
        rates.loop_flops / 1e9,
        rates.mem_bandwidth / 1e9,
        rates.cache_bandwidth / 1e9,
        rates.gett_call * 1e6
    );
    let text = rates.to_toml();
    let path = match out {
        Some(p) if p.as_os_str() == "-" => {
            print!("{text}");
            return Outcome::Ok;
        }
        Some(p) => p,
        None => match tcc::lir::cost::CpuRates::default_path() {
            Some(p) => p,
            None => return ctx.fail("E0723", "no home directory: pass --out FILE", None),
        },
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return ctx.fail("E0723", &format!("cannot create `{}`: {e}", dir.display()), None);
        }
    }
    match std::fs::write(&path, text) {
        Ok(()) => {
            eprintln!("tune: wrote {}", path.display());
            Outcome::Ok
        }
        Err(e) => ctx.fail("E0723", &format!("cannot write `{}`: {e}", path.display()), None),
    }
}

/// `tcc opt`: the optimizer's report or one of its intermediate forms.
fn opt_command(
    hir: &tcc::sema::hir::Hir,
    units: &[tcc::sema::hir::UnitId],
    emit: Emit,
    json: bool,
    popts: &tcc::pipeline::PipelineOptions,
) -> String {
    let (opt, report) = tcc::pipeline::optimize(hir, popts);
    // The nests the back ends compile: of the prepared program.
    let (prepared, nests) = tcc::pipeline::prepare_fused(hir, units, popts);
    let mem_limit = popts.fusion.mem_limit;
    let selected = |name: &str| units.iter().any(|&u| hir.units[u].name == name);
    match emit {
        Emit::Hir => tcc::pipeline::hir_text(hir, units),
        Emit::Opt => tcc::pipeline::hir_text(&opt, units),
        Emit::Tir => tcc::tir::lower(hir).to_string(),
        Emit::Lir => nests.iter().map(|n| n.dump(&prepared)).collect(),
        Emit::Llvm | Emit::Ptx => unreachable!("handled by the caller"),
        Emit::Report => {
            let stmts: Vec<&tcc::tir::StmtReport> = report.stmts.iter().filter(|s| selected(&s.unit)).collect();
            let fused: Vec<serde_json::Value> = nests
                .iter()
                .map(|n| {
                    serde_json::json!({
                        "unit": opt.units[n.unit].name,
                        "peak_bytes": n.peak_bytes,
                        "unfused_peak_bytes": n.unfused_peak_bytes,
                        "fits_mem_limit": mem_limit.map(|l| n.peak_bytes <= l),
                        "fuse": popts.fusion.mode.name(),
                        "model_seconds": n.time_s,
                        "unfused_model_seconds": n.unfused_time_s,
                        "gemms_made_loops": n.gemms_made_loops().iter().map(|(st, term, k)| serde_json::json!({
                            "statement": st, "term": term, "unfused_kernel": k.to_string() })).collect::<Vec<_>>(),
                    })
                })
                .collect();
            if json {
                let v = serde_json::json!({ "statements": stmts, "loop_nests": fused,
                    "flops_before": report.flops_before, "flops_after": report.flops_after,
                    "tiled": tcc::tiled::cost::json(hir, units) });
                return serde_json::to_string_pretty(&v).unwrap_or_default() + "\n";
            }
            let mut s = tcc::tir::report_text(&tcc::tir::OptReport {
                stmts: stmts.into_iter().cloned().collect(),
                flops_before: report.flops_before,
                flops_after: report.flops_after,
            });
            for n in &nests {
                s.push_str(&format!(
                    "{}: fused loop nests need {} of temporaries at peak (unfused: {})",
                    opt.units[n.unit].name,
                    tcc::plan::report::bytes(n.peak_bytes),
                    tcc::plan::report::bytes(n.unfused_peak_bytes)
                ));
                match mem_limit {
                    Some(l) if n.peak_bytes > l => {
                        s.push_str(&format!(" — does NOT fit in {}", tcc::plan::report::bytes(l)))
                    }
                    Some(l) => s.push_str(&format!(" — fits in {}", tcc::plan::report::bytes(l))),
                    None => {}
                }
                s.push('\n');
                s.push_str(&format!(
                    "{}: --fuse {}: model time {} (unfused: {})\n",
                    opt.units[n.unit].name,
                    popts.fusion.mode.name(),
                    tcc::lir::seconds(n.time_s),
                    tcc::lir::seconds(n.unfused_time_s)
                ));
                let why = match popts.fusion.mode {
                    tcc::lir::fusion::FuseMode::Max => "--fuse max asks for the least memory",
                    _ if mem_limit.is_some_and(|l| n.unfused_peak_bytes > l) => "the memory limit forces fusion",
                    _ => "the time model finds the fused nest faster",
                };
                for (st, term, k) in n.gemms_made_loops() {
                    s.push_str(&format!(
                        "{}: statement {} term {} is GEMM-shaped ({k}) but runs as loops inside fused loops: {why}\n",
                        opt.units[n.unit].name,
                        st + 1,
                        term + 1
                    ));
                }
            }
            s.push_str(&tcc::tiled::cost::report(hir, units));
            s
        }
    }
}

/// Whether the command line asks for `--error-format json` (read by hand: it is
/// needed when clap could not parse the rest).
fn json_errors_asked() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().enumerate().any(|(k, a)| {
        a == "--error-format=json" || (a == "--error-format" && args.get(k + 1).is_some_and(|v| v == "json"))
    })
}

/// A closed stdout (`tcc opt F | head`) ends tcc quietly, as it ends other Unix
/// tools, rather than with a "failed printing to stdout" internal error: Rust
/// ignores SIGPIPE by default; restore the default action.
#[cfg(target_os = "linux")]
fn default_sigpipe() {
    extern "C" {
        fn signal(signum: i32, handler: usize) -> usize;
    }
    const SIGPIPE: i32 = 13;
    const SIG_DFL: usize = 0;
    // SAFETY: sets the disposition of one signal to its default, before any thread starts.
    unsafe {
        signal(SIGPIPE, SIG_DFL);
    }
}

#[cfg(not(target_os = "linux"))]
fn default_sigpipe() {}

fn main() -> ExitCode {
    default_sigpipe();
    // Usage errors are user errors (exit 1); --help and --version succeed.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            if e.use_stderr() && json_errors_asked() {
                // Tools that asked for JSON get usage errors as JSON too (E0700).
                let message = e.render().to_string();
                let message = message.trim_end().trim_start_matches("error: ");
                let v = serde_json::json!({"code": "E0700", "severity": "error", "message": message, "hint": null});
                eprintln!("{v}");
                return ExitCode::from(1);
            }
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
        // A rank stopped because another failed: that failure is reported, once.
        if info.payload().is::<tcc_runtime::comm::threads::Aborted>() {
            return;
        }
        // A failure injected on purpose (TCC_INJECT_FAILURE) is not a bug: the
        // launcher reports it as the rank's failure (E0720), once.
        if info.payload().downcast_ref::<String>().is_some_and(|m| m.ends_with("(TCC_INJECT_FAILURE)")) {
            return;
        }
        eprintln!("internal compiler error: {info}");
        eprintln!("this is a bug in tcc; please report it with the input that caused it");
    }));
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_command(&ctx, cli.command))) {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::UserError) => ExitCode::from(1),
        Err(_) => ExitCode::from(2),
    }
}
