//! The writing side of a run: the output files created at their full size, a thread of
//! its own that writes each converted slab at its offset (whole blocks by direct I/O,
//! from the slab itself: see [`PlacedFile`]), and the loop that hands it slabs as the
//! workers fill them, reusing at most [`SLABS`] of them.

use super::FileHeader;
use super::RunError;
use super::digest::{Digests, bytes_digest};
use super::header::OutputPart;
use super::progress::Tracker;
use super::quality::Quality;
use super::schedule::{Extent, Piece, Place, conversion_order};
use crate::model::Tensor;
use crate::pipeline::plan::Plan;
use quantforge_formats::output::{AlignedBuffer, Durability, PlacedFile};
use rayon::prelude::*;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// A batch converted into a slab, on its way to the file.
pub(super) struct Filled {
    /// The batch (`None`: a file's header).
    pub(super) batch: Option<usize>,
    /// The output it belongs to.
    pub(super) output: usize,
    /// Its output; the file's bytes `at..` are `slab[skip..skip + len]`, placed so that
    /// the slab's memory is aligned like the file offsets (direct I/O writes from it).
    pub(super) slab: AlignedBuffer,
    pub(super) skip: usize,
    pub(super) len: usize,
    /// The file, among every output's files.
    pub(super) part: usize,
    pub(super) at: u64,
}

/// Output slabs of each output in use at once: converted, queued, or being written.
const SLABS: usize = 4;

/// Batches converted at once: the workers take tasks of one while the last tasks of the
/// other finish, so no worker waits at the end of every batch for the slowest task.
const AT_ONCE: usize = 2;

/// What the converting side of a run reads.
pub(super) struct Job<'a, 's> {
    /// Each output's plan; all list the same tensors in the same order.
    pub(super) plans: &'a [&'a Plan],
    /// Each tensor of the plans in the source, in plan order.
    pub(super) sources: &'a [&'a Tensor<'s>],
    /// For each output, each tensor's importance values, when it uses them.
    pub(super) weights: &'a [Vec<Option<&'a [f32]>>],
    /// For each output, every tensor cut into pieces ([`super::schedule::pieces`]).
    pub(super) pieces: &'a [Vec<Piece>],
    /// The pieces grouped into batches ([`super::schedule::batches`]), the same for every
    /// output.
    pub(super) batches: &'a [Range<usize>],
    /// Where converted rows are measured, with `--report`.
    pub(super) quality: Option<&'a Quality>,
    /// Where the tensors' digests are summed.
    pub(super) digests: &'a Digests,
    /// For the one output of a `--reuse` run, each tensor's data in the old output and
    /// where the tensor starts in the new one.
    pub(super) reused: &'a [Option<(&'a [u8], u64)>],
}

impl Job<'_, '_> {
    /// Where batch `b`'s output for output `k` sits in its slab.
    pub(super) fn extent(&self, k: usize, b: usize) -> Extent {
        Extent::of(&self.pieces[k][self.batches[b].clone()])
    }

    /// The pieces of output `k` in batch `b`.
    pub(super) fn batch_pieces(&self, k: usize, b: usize) -> &[Piece] {
        &self.pieces[k][self.batches[b].clone()]
    }

    /// Converts batch after batch on the current rayon pool, in
    /// [`conversion_order`], while a thread of its own writes each converted slab in
    /// place; at most [`SLABS`] slabs of each output are in use, so the converting waits
    /// only when the disk is that far behind. `files` are every output's files, in order.
    pub(super) fn write_all(
        &self,
        files: &mut [PlacedFile],
        headers: Vec<Filled>,
        tracker: &mut Tracker<'_, '_>,
    ) -> Result<(), RunError> {
        let order = conversion_order(self.plans, self.sources, self.pieces, self.batches);
        let files_path = files
            .first()
            .map(|f| f.path().to_path_buf())
            .unwrap_or_default();
        let abandon = AtomicBool::new(false);
        let abandon = &abandon;
        std::thread::scope(|scope| {
            let (to_writer, queue) = std::sync::mpsc::channel::<Filled>();
            let (back, written) = std::sync::mpsc::channel::<Written>();
            let writer = std::thread::Builder::new()
                .name("quantforge-writer".into())
                .spawn_scoped(scope, move || {
                    for f in queue {
                        if abandon.load(Ordering::Relaxed) {
                            break;
                        }
                        let file = &mut files[f.part];
                        let done = file
                            .write_at(&f.slab.as_slice()[f.skip..f.skip + f.len], f.at)
                            .map_err(|cause| RunError::Output {
                                what: "cannot write",
                                path: file.path().to_path_buf(),
                                cause,
                            });
                        let failed = done.is_err();
                        let written = Written {
                            filled: f,
                            result: done,
                        };
                        if back.send(written).is_err() || failed {
                            break;
                        }
                    }
                })
                .map_err(|cause| RunError::Output {
                    what: "cannot start the thread that writes",
                    path: files_path.clone(),
                    cause,
                })?;
            let mut in_flight = 0;
            for h in headers {
                // A send fails only once the writer stopped on an error, sent back.
                in_flight += usize::from(to_writer.send(h).is_ok());
            }
            let converted = self.convert_all(&order, in_flight, &to_writer, &written, tracker);
            // After a failure the writer drops what is queued (the file is deleted anyway);
            // its own failure came back through `written`, a panic of it is re-raised.
            abandon.store(converted.is_err(), Ordering::Relaxed);
            drop(to_writer);
            if let Err(panic) = writer.join() {
                std::panic::resume_unwind(panic);
            }
            converted
        })
    }

    /// The converting loop of [`Job::write_all`].
    fn convert_all(
        &self,
        order: &[usize],
        mut in_flight: usize,
        to_writer: &std::sync::mpsc::Sender<Filled>,
        written: &std::sync::mpsc::Receiver<Written>,
        tracker: &mut Tracker<'_, '_>,
    ) -> Result<(), RunError> {
        // Every slab is made once, as large as the output's largest batch needs.
        let outputs = self.plans.len();
        let slab_len: Vec<usize> = (0..outputs)
            .map(|k| {
                (0..self.batches.len())
                    .map(|b| self.extent(k, b).end())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut free: Vec<Vec<AlignedBuffer>> = (0..outputs).map(|_| Vec::new()).collect();
        let mut made = vec![0; outputs];
        // A slab back from the writer: its batch is on disk.
        let mut take_back =
            |back: Written, free: &mut [Vec<AlignedBuffer>]| -> Result<(), RunError> {
                back.result?;
                let k = back.filled.output;
                if let Some(b) = back.filled.batch {
                    tracker.written(k, self.batch_pieces(k, b));
                    free[k].push(back.filled.slab);
                }
                Ok(())
            };
        for &b in order.iter().take(AT_ONCE) {
            self.prefetch(b)?;
        }
        for (c, group) in order.chunks(AT_ONCE).enumerate() {
            let mut jobs = Vec::with_capacity(group.len());
            for (i, &b) in group.iter().enumerate() {
                let mut slabs = Vec::with_capacity(outputs);
                for k in 0..outputs {
                    slabs.push(loop {
                        if let Some(slab) = free[k].pop() {
                            break slab;
                        }
                        if made[k] < SLABS {
                            made[k] += 1;
                            break AlignedBuffer::zeroed(slab_len[k]);
                        }
                        // Every slab of the output is queued or being written: wait for one.
                        let back = written.recv().map_err(|_| writer_gone())?;
                        in_flight -= 1;
                        take_back(back, &mut free)?;
                    });
                }
                // Each batch releases the pages of the one converted AT_ONCE before it
                // and asks for those of the one AT_ONCE after it.
                let k = c * AT_ONCE + i;
                let before = k.checked_sub(AT_ONCE).map(|j| order[j]);
                jobs.push((b, slabs, before, order.get(k + AT_ONCE).copied()));
            }
            let filled: Vec<Result<Vec<Filled>, RunError>> = jobs
                .into_par_iter()
                .map(|(b, slabs, before, next)| self.fill(b, slabs, before, next))
                .collect();
            for f in filled {
                for f in f? {
                    if to_writer.send(f).is_err() {
                        // The writer stopped on an error, which it sent back first.
                        while let Ok(back) = written.recv() {
                            take_back(back, &mut free)?;
                        }
                        return Err(writer_gone());
                    }
                    in_flight += 1;
                }
            }
            while let Ok(back) = written.try_recv() {
                in_flight -= 1;
                take_back(back, &mut free)?;
            }
        }
        for &b in order.iter().rev().take(AT_ONCE) {
            self.release(b)?;
        }
        while in_flight > 0 {
            let back = written.recv().map_err(|_| writer_gone())?;
            in_flight -= 1;
            take_back(back, &mut free)?;
        }
        Ok(())
    }
}

/// The writing thread stopped without a failure of its own (it cannot: it stops early
/// only after sending one back, or after a panic, which is re-raised).
fn writer_gone() -> RunError {
    RunError::Output {
        what: "cannot write",
        path: PathBuf::new(),
        cause: std::io::Error::other("the writing thread stopped"),
    }
}

/// A slab back from the writing thread: what it held, and whether writing it failed.
pub(super) struct Written {
    /// The slab and where it went.
    filled: Filled,
    /// The write's outcome.
    result: Result<(), RunError>,
}

/// The output files, created with their sizes reserved: their headers, queued for the
/// writing thread, and every tensor's place in them.
#[derive(Default)]
pub(super) struct Outputs {
    /// Every output's files, in order.
    pub(super) files: Vec<PlacedFile>,
    /// The output each file belongs to.
    pub(super) owners: Vec<usize>,
    /// Each file's header: its length and digest.
    pub(super) header_digests: Vec<FileHeader>,
    /// Each file's header bytes, to write first.
    pub(super) headers: Vec<Filled>,
    /// For each output, each tensor's place, in plan order.
    pub(super) places: Vec<Vec<Place>>,
}

impl Outputs {
    /// Creates the files of the next output (`parts`) at their full size, to be committed
    /// as durably as `durability` says.
    pub(super) fn add(
        &mut self,
        parts: &[OutputPart],
        durability: Durability,
    ) -> Result<(), RunError> {
        let output = self.places.len();
        let mut placed = Vec::new();
        for part in parts {
            let p = self.files.len();
            let (file, header) = Self::create_part(part, p, output, durability, &mut placed)?;
            self.header_digests.push(FileHeader {
                data_offset: header.len as u64,
                digest: bytes_digest(&header.slab.as_slice()[..header.len]),
            });
            self.files.push(file);
            self.owners.push(output);
            self.headers.push(header);
        }
        self.places.push(placed);
        Ok(())
    }

    /// Creates file `p` (of output `output`) as `part` says and adds its tensors'
    /// places; returns it with its header, to write first.
    fn create_part(
        part: &OutputPart,
        p: usize,
        output: usize,
        durability: Durability,
        places: &mut Vec<Place>,
    ) -> Result<(PlacedFile, Filled), RunError> {
        let (header_bytes, layout) = part.header.encode_aligned()?;
        let file =
            PlacedFile::create(&part.path, layout.file_size(), durability).map_err(|cause| {
                RunError::Output {
                    what: "cannot create",
                    path: part.path.clone(),
                    cause,
                }
            })?;
        // Written by the writing thread, straight from aligned memory, while the first
        // batches convert.
        let len = header_bytes.len();
        let header = Filled {
            batch: None,
            output,
            slab: header_bytes,
            skip: 0,
            len,
            part: p,
            at: 0,
        };
        let n = layout.offsets.len();
        for k in 0..n {
            let at = layout.data_offset + layout.offsets[k];
            let end = match layout.offsets.get(k + 1) {
                Some(next) => layout.data_offset + next,
                None => layout.file_size(),
            };
            places.push(Place {
                part: p,
                at,
                room: end - at,
            });
        }
        Ok((file, header))
    }
}
