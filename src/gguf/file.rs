//! GGUF files on disk (native only): read in chunks through the same streaming [`Parser`]
//! the page feeds from `fetch()`, so there is one load path whatever the source.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::{Event, GgufError, Header, Parser};

/// A file read in fixed-size chunks: the one read loop of the parser's and the loader's
/// file entry points.
pub struct FileChunks {
    file: std::fs::File,
    path: PathBuf,
    buf: Vec<u8>,
    /// The file's length in bytes.
    pub len: u64,
}

impl FileChunks {
    pub fn open(path: &Path, chunk_bytes: usize) -> Result<FileChunks, GgufError> {
        let io = |e: std::io::Error| GgufError::Io(format!("{}: {e}", path.display()));
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        Ok(FileChunks {
            file,
            path: path.to_path_buf(),
            buf: vec![0u8; chunk_bytes.max(1)],
            len,
        })
    }

    /// The next chunk, or `None` at the end of the file.
    pub fn next_chunk(&mut self) -> Result<Option<&[u8]>, GgufError> {
        let n = self
            .file
            .read(&mut self.buf)
            .map_err(|e| GgufError::Io(format!("{}: {e}", self.path.display())))?;
        Ok((n > 0).then(|| &self.buf[..n]))
    }
}

/// Reads a whole file in chunks, calling `on_event` as the parser does.
pub fn read_path(path: &Path, on_event: &mut dyn FnMut(Event<'_>)) -> Result<Header, GgufError> {
    let mut file = FileChunks::open(path, 4 << 20)?;
    let mut parser = Parser::new().with_expected_len(file.len);
    while let Some(chunk) = file.next_chunk()? {
        parser.push(chunk, on_event)?;
    }
    parser.finish()?;
    parser
        .into_header()
        .ok_or_else(|| GgufError::Io("header missing after a complete parse".into()))
}

/// Reads only the header (metadata + tensor infos) of a file.
pub fn read_header(path: &Path) -> Result<Header, GgufError> {
    let mut file = FileChunks::open(path, 1 << 20)?;
    let mut parser = Parser::new().with_expected_len(file.len);
    while parser.header().is_none() {
        match file.next_chunk()? {
            Some(chunk) => parser.push(chunk, &mut |_| {})?,
            None => {
                parser.finish()?;
                break;
            }
        }
    }
    parser
        .into_header()
        .ok_or_else(|| GgufError::Io("header missing".into()))
}
