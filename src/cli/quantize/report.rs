//! What `quantforge quantize` prints: the plan (`--dry-run`); progress while it runs, as a
//! bar on standard error when that is a terminal and as one line per tensor on standard
//! output when it is not (a log, a pipe), neither with `--quiet`; and a summary table at
//! the end.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use quantforge::pipeline::imatrix::ImatrixUse;
use quantforge::pipeline::plan::Plan;
use quantforge::pipeline::plan::Preset;
use quantforge::pipeline::run::{PlannedFile, Progress, Summary, TensorQuality};
use quantforge_kernels::GgmlType;
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

/// Names listed in the summary before "and N more".
const MAX_LISTED: usize = 6;

/// Bytes in MiB.
pub(super) fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn shape(ne: &[u64; 4]) -> String {
    let n_dims = ne.iter().rposition(|&n| n > 1).map_or(1, |i| i + 1);
    ne[..n_dims]
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Tensor bytes of a plan's source and output, and its elements.
fn plan_totals(plan: &Plan) -> (u64, u64, u64) {
    plan.tensors.iter().fold((0, 0, 0), |(b, a, n), t| {
        (
            b + t.bytes_as(t.source).unwrap_or(0),
            a + t.bytes_as(t.target).unwrap_or(0),
            n + t.n_elements(),
        )
    })
}

/// Bits per weight of `bytes` of tensor data over `elements`.
fn bits_per_weight(bytes: u64, elements: u64) -> f64 {
    bytes as f64 * 8.0 / elements.max(1) as f64
}

/// `--dry-run`: one line per tensor (types, sizes, why), the totals with the output's
/// bits per weight (tensor data over elements), and the files that would be written
/// with their exact sizes, on standard output.
pub(super) fn print_plan(plan: &Plan, files: &[PlannedFile]) {
    let mut out = std::io::stdout().lock();
    for t in &plan.tensors {
        let b = t.bytes_as(t.source).unwrap_or(0);
        let a = t.bytes_as(t.target).unwrap_or(0);
        let fallback = t
            .fallback
            .map(|f| format!(", fallback from {}", f.wanted))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<40} [{:>16}] {:>7} -> {:<7} {:>10.3} MiB -> {:>10.3} MiB  {}{fallback}",
            t.name,
            shape(&t.ne),
            t.source.name(),
            t.target.name(),
            mib(b),
            mib(a),
            t.reason,
        );
    }
    let (before, after, elements) = plan_totals(plan);
    let _ = writeln!(
        out,
        "{} tensors, {:.2} MiB -> {:.2} MiB ({:.2} -> {:.2} bits per weight), {} fallbacks, \
         general.file_type = {}",
        plan.tensors.len(),
        mib(before),
        mib(after),
        bits_per_weight(before, elements),
        bits_per_weight(after, elements),
        plan.n_fallback,
        plan.file_type
    );
    for f in files {
        let _ = writeln!(
            out,
            "would write {} ({} bytes, {:.2} MiB)",
            f.path.display(),
            f.size,
            mib(f.size)
        );
    }
}

/// `--dry-run` of several outputs: a line per output with its preset, file size (all its
/// parts) and bits per weight.
pub(super) fn print_outputs(plans: &[Plan], labels: &[&str], files: &[Vec<PlannedFile>]) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{:<10} {:>12} {:>8}  file", "output", "MiB", "bpw");
    for ((plan, label), files) in plans.iter().zip(labels).zip(files) {
        let (_, after, elements) = plan_totals(plan);
        let size: u64 = files.iter().map(|f| f.size).sum();
        let first = files.first().map(|f| f.path.display().to_string());
        let _ = writeln!(
            out,
            "{label:<10} {:>12.2} {:>8.2}  {}",
            mib(size),
            bits_per_weight(after, elements),
            first.unwrap_or_default()
        );
    }
}

/// How progress is shown while tensors are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ProgressMode {
    /// Nothing (`--quiet`).
    Quiet,
    /// One line per tensor on standard output.
    Lines,
    /// A bar on standard error: tensors done, bytes, rate, ETA.
    Bar,
}

impl ProgressMode {
    /// `--quiet` shows nothing; a terminal on standard error gets the bar; anything else
    /// gets the lines.
    pub(super) fn choose(quiet: bool) -> ProgressMode {
        if quiet {
            ProgressMode::Quiet
        } else if std::io::stderr().is_terminal() {
            ProgressMode::Bar
        } else {
            ProgressMode::Lines
        }
    }
}

/// Tensors and bytes of one (source type, output type) pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PairTally {
    tensors: usize,
    bytes_in: u64,
    bytes_out: u64,
}

/// What the summary reports, gathered tensor by tensor.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pairs: BTreeMap<(GgmlType, GgmlType), PairTally>,
    /// Fallbacks taken, by (type wanted, type given).
    fallbacks: BTreeMap<(GgmlType, GgmlType), usize>,
    /// Converted tensors quantized without importance data although an imatrix was given.
    without_imatrix: Vec<String>,
}

impl Tally {
    fn add(&mut self, p: &Progress<'_>) {
        let t = p.tensor;
        let pair = self.pairs.entry((t.source, t.target)).or_default();
        pair.tensors += 1;
        pair.bytes_in += p.bytes_in;
        pair.bytes_out += p.bytes_out;
        if let Some(f) = t.fallback {
            *self.fallbacks.entry((f.wanted, t.target)).or_default() += 1;
        }
        if matches!(p.imatrix, Some(u) if u != ImatrixUse::Used) {
            self.without_imatrix.push(t.name.clone());
        }
    }

    /// The summary table: one row per type pair (in ggml type code order) with tensor
    /// counts and sizes, the totals,
    /// the fallbacks, time and rate, and (with an imatrix) how many tensors it weighted.
    pub(super) fn table(&self, s: &Summary, imatrix: bool) -> String {
        let mut out = String::new();
        let files: Vec<String> = s.files.iter().map(|f| f.display().to_string()).collect();
        let _ = writeln!(
            out,
            "wrote {} ({:.2} MiB)",
            files.join(", "),
            mib(s.file_size)
        );
        let _ = writeln!(
            out,
            "  {:<7}    {:<7} {:>7} {:>12}    {:>12}",
            "source", "output", "tensors", "MiB before", "MiB after"
        );
        for (&(from, to), p) in &self.pairs {
            let _ = writeln!(
                out,
                "  {:<7} -> {:<7} {:>7} {:>12.3} -> {:>12.3}",
                from.name(),
                to.name(),
                p.tensors,
                mib(p.bytes_in),
                mib(p.bytes_out)
            );
        }
        let _ = writeln!(
            out,
            "  {:<18} {:>7} {:>12.3} -> {:>12.3}",
            "total",
            s.tensors,
            mib(s.bytes_in),
            mib(s.bytes_out)
        );
        let n_fallback: usize = self.fallbacks.values().sum();
        let fallbacks = if n_fallback == 0 {
            "0 fallbacks".to_string()
        } else {
            let kinds: Vec<String> = self
                .fallbacks
                .iter()
                .map(|((wanted, got), n)| format!("{wanted} -> {got}: {n}"))
                .collect();
            format!("{n_fallback} fallbacks ({})", kinds.join(", "))
        };
        let _ = writeln!(
            out,
            "  {} converted, {fallbacks}; {:.2} s, {:.1} MB/s",
            s.converted,
            s.seconds,
            s.bytes_in as f64 / 1e6 / s.seconds.max(1e-9)
        );
        if imatrix {
            let _ = write!(
                out,
                "imatrix: {} of {} converted tensors weighted",
                s.imatrix_used, s.converted
            );
            if !self.without_imatrix.is_empty() {
                let shown = &self.without_imatrix[..self.without_imatrix.len().min(MAX_LISTED)];
                let more = self.without_imatrix.len() - shown.len();
                let _ = write!(out, "; none for {}", shown.join(", "));
                if more > 0 {
                    let _ = write!(out, " and {more} more");
                }
            }
            out.push('\n');
        }
        out
    }
}

/// Shows progress as tensors are written and gathers the summaries, of one output or of
/// several written in one pass.
pub(super) struct Reporter<'p> {
    plans: &'p [Plan],
    /// Each output's name in progress lines, when there are several (else empty).
    labels: &'p [&'p str],
    mode: ProgressMode,
    bar: Option<ProgressBar>,
    tallies: Vec<Tally>,
    /// Tensors done, over all outputs.
    done: usize,
}

impl<'p> Reporter<'p> {
    /// A reporter for `plans` (`labels` naming each when there are several); the bar (in
    /// [`ProgressMode::Bar`]) counts source bytes, once per output.
    pub(super) fn new(
        plans: &'p [Plan],
        labels: &'p [&'p str],
        mode: ProgressMode,
    ) -> Reporter<'p> {
        let bar = (mode == ProgressMode::Bar).then(|| {
            let total = plans
                .iter()
                .flat_map(|p| &p.tensors)
                .map(|t| t.bytes_as(t.source).unwrap_or(0))
                .sum();
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            // The template is fixed, so it parses; fall back to the default style anyway.
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} {prefix} {bar:20} {binary_bytes}/{binary_total_bytes} \
                 {binary_bytes_per_sec} ETA {eta} {wide_msg}",
            ) {
                bar.set_style(style);
            }
            bar.set_prefix(format!("0/{} tensors", total_tensors(plans)));
            if let Some(t) = plans.first().and_then(|p| p.tensors.first()) {
                bar.set_message(t.name.clone());
            }
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        Reporter {
            plans,
            labels,
            mode,
            bar,
            tallies: plans.iter().map(|_| Tally::default()).collect(),
            done: 0,
        }
    }

    /// One tensor written.
    pub(super) fn tensor_done(&mut self, p: &Progress<'_>) {
        self.tallies[p.output].add(p);
        self.done += 1;
        let label = self.labels.get(p.output);
        match (&self.bar, self.mode) {
            (Some(bar), _) => {
                bar.inc(p.bytes_in);
                // Tensors done (always in view) and the output's next one (cut to the
                // terminal width).
                bar.set_prefix(format!(
                    "{}/{} tensors",
                    self.done,
                    total_tensors(self.plans)
                ));
                let next = self.plans[p.output]
                    .tensors
                    .get(p.done)
                    .map_or("", |t| t.name.as_str());
                bar.set_message(match label {
                    Some(label) => format!("{label} {next}"),
                    None => next.to_string(),
                });
            }
            (None, ProgressMode::Lines) => match label {
                Some(label) => println!("{label}: {}", progress_line(p)),
                None => println!("{}", progress_line(p)),
            },
            (None, _) => {}
        }
    }

    /// Clears the bar and prints each output's summary table on standard output.
    pub(super) fn finish(self, summaries: &[Summary], imatrix: bool) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        for (tally, summary) in self.tallies.iter().zip(summaries) {
            print!("{}", tally.table(summary, imatrix));
            print!("{}", worst_tensors(&summary.quality));
        }
        for s in summaries.iter().filter(|s| s.reused > 0) {
            println!(
                "reused {} tensor(s) from the old output (--reuse)",
                s.reused
            );
        }
        if let [first, _, ..] = summaries {
            println!(
                "{} outputs in one pass: {:.2} s",
                summaries.len(),
                first.seconds
            );
        }
    }
}

/// Tensors the summary lists as the worst measured.
const WORST: usize = 5;

/// The converted tensors furthest from their source values (lowest cosine similarity),
/// when they were measured.
fn worst_tensors(quality: &[TensorQuality]) -> String {
    let mut ranked: Vec<&TensorQuality> = quality.iter().collect();
    let cos = |q: &TensorQuality| q.stats.cosine().unwrap_or(1.0);
    ranked.sort_by(|a, b| cos(a).total_cmp(&cos(b)));
    let mut out = String::new();
    if ranked.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "  worst tensors (lowest cosine similarity to the source):"
    );
    for q in ranked.iter().take(WORST) {
        let _ = writeln!(
            out,
            "    {:<40} {:>5} -> {:<7} cosine {:.6}  rmse {:.3e}  max error {:.3e}",
            q.name,
            q.source.name(),
            q.target.name(),
            cos(q),
            q.stats.rmse().unwrap_or(0.0),
            q.stats.max_abs
        );
    }
    out
}

/// `--report`: every measured tensor of every output, in plan order, as JSON (the
/// figures named as `quantforge diff --json` names them, A the source, B the output).
pub(super) fn quality_json(
    input: &Path,
    plans: &[Plan],
    targets: &[(Preset, PathBuf)],
    summaries: &[Summary],
) -> Json {
    let outputs: Vec<Json> = plans
        .iter()
        .zip(targets)
        .zip(summaries)
        .map(|((plan, (preset, _)), summary)| {
            let by_name: HashMap<&str, &TensorQuality> = summary
                .quality
                .iter()
                .map(|q| (q.name.as_str(), q))
                .collect();
            let tensors: Vec<Json> = plan
                .tensors
                .iter()
                .filter_map(|t| by_name.get(t.name.as_str()))
                .map(|q| {
                    let s = &q.stats;
                    json!({
                        "name": q.name,
                        "source_type": q.source.name(),
                        "type": q.target.name(),
                        "elements_compared": s.compared,
                        "rmse": s.rmse(),
                        "max_abs_error": s.max_index.map(|_| s.max_abs),
                        "max_error_index": s.max_index,
                        "cosine": s.cosine(),
                    })
                })
                .collect();
            json!({
                "preset": preset.name,
                "files": summary.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
                "tensors": tensors,
            })
        })
        .collect();
    json!({
        "input": input.display().to_string(),
        "outputs": outputs,
    })
}

/// Tensors of every plan.
fn total_tensors(plans: &[Plan]) -> usize {
    plans.iter().map(|p| p.tensors.len()).sum()
}

impl Drop for Reporter<'_> {
    /// A failed run leaves no half-drawn bar above its error message.
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The line of one tensor when progress goes to a log: position, name, shape, types,
/// sizes, and what became of its importance data when it had none.
fn progress_line(p: &Progress<'_>) -> String {
    let t = p.tensor;
    let imatrix = match p.imatrix {
        None | Some(ImatrixUse::Used) => String::new(),
        Some(ImatrixUse::NoEntry) => "  (no imatrix entry)".to_string(),
        Some(ImatrixUse::WrongSizeIgnored { len, expected }) => {
            format!("  (imatrix entry of {len} values, not {expected}: ignored)")
        }
    };
    format!(
        "[{:>4}/{:>4}] {:<40} [{:>16}] {:>7} -> {:<7} {:>10.3} MiB -> {:>10.3} MiB{imatrix}",
        p.done,
        p.total,
        t.name,
        shape(&t.ne),
        t.source.name(),
        t.target.name(),
        mib(p.bytes_in),
        mib(p.bytes_out),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use quantforge::pipeline::plan::{Fallback, Reason, TensorPlan};

    fn tensor(name: &str, source: GgmlType, target: GgmlType) -> TensorPlan {
        TensorPlan {
            input_index: 0,
            name: name.to_string(),
            source_name: name.to_string(),
            ne: [256, 4, 1, 1],
            source,
            target,
            reason: Reason::Default,
            fallback: None,
            quantizable: true,
            requires_imatrix: false,
            split: 0,
        }
    }

    fn progress<'a>(
        t: &'a TensorPlan,
        done: usize,
        bytes_out: u64,
        imatrix: Option<ImatrixUse>,
    ) -> Progress<'a> {
        Progress {
            output: 0,
            done,
            total: 4,
            tensor: t,
            index: done - 1,
            bytes_in: 2048,
            bytes_out,
            imatrix,
        }
    }

    #[test]
    fn table_counts_type_pairs_sizes_fallbacks_and_imatrix_use() {
        use GgmlType as T;
        let a = tensor("blk.0.attn_q.weight", T::F16, T::Q4_K);
        let b = tensor("blk.0.attn_k.weight", T::F16, T::Q4_K);
        let mut c = tensor("blk.0.ffn_down.weight", T::F16, T::Q5_0);
        c.fallback = Some(Fallback {
            wanted: T::Q4_K,
            ncols: 256,
        });
        let d = tensor("blk.0.attn_norm.weight", T::F32, T::F32);
        let mut tally = Tally::default();
        tally.add(&progress(&a, 1, 576, Some(ImatrixUse::Used)));
        tally.add(&progress(&b, 2, 576, Some(ImatrixUse::NoEntry)));
        tally.add(&progress(&c, 3, 704, Some(ImatrixUse::Used)));
        tally.add(&progress(&d, 4, 2048, None));
        let summary = Summary {
            tensors: 4,
            converted: 3,
            imatrix_used: 2,
            bytes_in: 4 * 2048,
            bytes_out: 576 * 2 + 704 + 2048,
            file_size: 1 << 20,
            files: vec!["out.gguf".into()],
            seconds: 0.5,
            ..Summary::default()
        };
        let table = tally.table(&summary, true);
        let expected = "\
wrote out.gguf (1.00 MiB)
  source     output  tensors   MiB before       MiB after
  f32     -> f32           1        0.002 ->        0.002
  f16     -> q5_0          1        0.002 ->        0.001
  f16     -> q4_K          2        0.004 ->        0.001
  total                    4        0.008 ->        0.004
  3 converted, 1 fallbacks (q4_K -> q5_0: 1); 0.50 s, 0.0 MB/s
imatrix: 2 of 3 converted tensors weighted; none for blk.0.attn_k.weight
";
        assert_eq!(table, expected);
        // Without an imatrix, no imatrix line.
        assert!(!tally.table(&summary, false).contains("imatrix"));
    }

    #[test]
    fn long_lists_of_unweighted_tensors_are_cut() {
        let ts: Vec<TensorPlan> = (0..9)
            .map(|i| tensor(&format!("t{i}"), GgmlType::F16, GgmlType::Q8_0))
            .collect();
        let mut tally = Tally::default();
        for (i, t) in ts.iter().enumerate() {
            tally.add(&progress(t, i + 1, 100, Some(ImatrixUse::NoEntry)));
        }
        let table = tally.table(&Summary::default(), true);
        assert!(
            table.contains("none for t0, t1, t2, t3, t4, t5 and 3 more"),
            "{table}"
        );
    }

    #[test]
    fn log_lines_say_when_a_tensor_had_no_usable_entry() {
        let t = tensor("token_embd.weight", GgmlType::F16, GgmlType::Q4_K);
        let line = progress_line(&progress(
            &t,
            1,
            576,
            Some(ImatrixUse::WrongSizeIgnored {
                len: 7,
                expected: 256,
            }),
        ));
        assert!(line.starts_with("[   1/   4] token_embd.weight"), "{line}");
        assert!(line.contains("f16 -> q4_K"), "{line}");
        assert!(
            line.ends_with("(imatrix entry of 7 values, not 256: ignored)"),
            "{line}"
        );
        let line = progress_line(&progress(&t, 1, 576, Some(ImatrixUse::Used)));
        assert!(line.ends_with("MiB"), "{line}");
    }

    #[test]
    fn the_bar_counts_source_bytes_and_names_the_next_tensor() {
        use quantforge::pipeline::plan::{ModelParams, Options, Preset, TensorSpec, plan};
        let model = ModelParams::new("llama", 1, 8, 8);
        let specs = [
            TensorSpec::new("blk.0.attn_v.weight", [256, 4, 1, 1], GgmlType::F16),
            TensorSpec::new("blk.0.attn_norm.weight", [256, 1, 1, 1], GgmlType::F32),
        ];
        let plan = plan(
            &model,
            &specs,
            &Options::new(Preset::parse("Q8_0").unwrap()),
        )
        .unwrap();
        // Standard error is not a terminal under the test harness: the bar draws nothing.
        let plans = [plan];
        let mut r = Reporter::new(&plans, &[], ProgressMode::Bar);
        let bar = r.bar.clone().expect("a bar");
        assert_eq!(bar.length(), Some(2048 + 1024));
        assert_eq!(bar.prefix(), "0/2 tensors");
        assert_eq!(bar.message(), "blk.0.attn_norm.weight");
        r.tensor_done(&Progress {
            output: 0,
            done: 1,
            total: 2,
            tensor: &plans[0].tensors[0],
            index: 0,
            bytes_in: 1024,
            bytes_out: 1024,
            imatrix: None,
        });
        assert_eq!(bar.position(), 1024);
        assert_eq!(bar.prefix(), "1/2 tensors");
        assert_eq!(bar.message(), "blk.0.attn_v.weight");
        assert_eq!(r.tallies[0].pairs.len(), 1);
    }
}
