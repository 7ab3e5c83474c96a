//! Loading a dump into a new cluster's primary so that the replicas get it too: everything
//! must reach the binary log, under the server's own GTIDs. A MySQL dump taken with GTIDs
//! (`--set-gtid-purged=AUTO`) says the opposite in its head: `SET @@SESSION.SQL_LOG_BIN= 0`
//! and `SET @@GLOBAL.GTID_PURGED=...` (which would also declare the source's transactions
//! purged, so replicas could not start). [`BinloggedLoad`] comments both out of the head, before
//! the first database; the rest of the stream passes untouched. MariaDB dumps carry neither
//! (their GTID position is a comment), so for them it changes nothing.

use bytes::Bytes;

use crate::error::Result;
use crate::reader::ChunkSink;

/// Where a dump's head ends: the first database.
const HEAD_END: &[u8] = b"\n-- Current Database:";
/// The head is never longer than this (it holds settings and a GTID set); past it, the
/// stream passes as it is.
const HEAD_LIMIT: usize = 4 << 20;

/// Comments out, line by line, the statements of a dump head that keep a load out of the
/// binary log or set the purged GTIDs; everything else is kept byte for byte.
pub fn rewrite_head(head: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + 64);
    let mut in_purged = false;
    for line in head.split_inclusive(|&b| b == b'\n') {
        let squeezed: Vec<u8> = line
            .iter()
            .filter(|b| !b.is_ascii_whitespace())
            .map(u8::to_ascii_uppercase)
            .collect();
        let starts_purged = squeezed.starts_with(b"SET@@GLOBAL.GTID_PURGED=");
        let log_off = squeezed.starts_with(b"SET@@SESSION.SQL_LOG_BIN=0;")
            || squeezed.starts_with(b"SETSQL_LOG_BIN=0;")
            || squeezed.starts_with(b"SET@@SQL_LOG_BIN=0;");
        if in_purged || starts_purged || log_off {
            out.extend_from_slice(b"-- ");
            out.extend_from_slice(line);
            if starts_purged || in_purged {
                in_purged = !squeezed.ends_with(b";");
            }
        } else {
            out.extend_from_slice(line);
        }
    }
    out
}

/// A sink that passes a dump on with its head rewritten by [`rewrite_head`]. Call
/// [`BinloggedLoad::finish`] after the last chunk: a dump shorter than its head is held until
/// then.
pub struct BinloggedLoad<S> {
    inner: S,
    /// The head gathered so far; `None` once it has been passed on.
    head: Option<Vec<u8>>,
}

impl<S: ChunkSink> BinloggedLoad<S> {
    /// Wraps `inner`, rewriting the head.
    pub fn new(inner: S) -> Self {
        BinloggedLoad {
            inner,
            head: Some(Vec::new()),
        }
    }

    /// Wraps `inner`, passing everything as it is (a load that keeps the dump's own settings).
    pub fn as_dumped(inner: S) -> Self {
        BinloggedLoad { inner, head: None }
    }

    async fn pass_head(&mut self) -> Result<()> {
        if let Some(head) = self.head.take() {
            let end = find(&head, HEAD_END).unwrap_or(head.len());
            let mut out = rewrite_head(&head[..end]);
            out.extend_from_slice(&head[end..]);
            self.inner.accept(Bytes::from(out)).await?;
        }
        Ok(())
    }

    /// Passes on what is still held.
    pub async fn finish(&mut self) -> Result<()> {
        self.pass_head().await
    }

    /// The wrapped sink.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

#[async_trait::async_trait]
impl<S: ChunkSink> ChunkSink for BinloggedLoad<S> {
    async fn accept(&mut self, chunk: Bytes) -> Result<()> {
        let Some(head) = self.head.as_mut() else {
            return self.inner.accept(chunk).await;
        };
        head.extend_from_slice(&chunk);
        if find(head, HEAD_END).is_some() || head.len() >= HEAD_LIMIT {
            self.pass_head().await?;
        }
        Ok(())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head of `mysqldump --single-transaction --source-data=2 --set-gtid-purged=AUTO
    /// --all-databases` from a server with GTIDs (8.0), with a set long enough to be broken
    /// over lines.
    const MYSQL_HEAD: &str = "-- MySQL dump 10.13  Distrib 8.0.36, for Linux (x86_64)\n\
--\n\
-- Host: localhost    Database: \n\
-- ------------------------------------------------------\n\
-- Server version\t8.0.36\n\
\n\
/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;\n\
/*!40111 SET @OLD_SQL_NOTES=@@SQL_NOTES, SQL_NOTES=0 */;\n\
SET @MYSQLDUMP_TEMP_LOG_BIN = @@SESSION.SQL_LOG_BIN;\n\
SET @@SESSION.SQL_LOG_BIN= 0;\n\
\n\
--\n\
-- GTID state at the beginning of the backup \n\
--\n\
\n\
SET @@GLOBAL.GTID_PURGED=/*!80000 '+'*/ '7664fad8-49fd-11e8-a546-4201c0a8010a:1-766741,\n\
90e79fc1-49fd-11e8-a6dd-4201c0a8010b:1-20227';\n\
\n\
--\n\
-- Position to start replication or point-in-time recovery from\n\
--\n\
\n\
-- CHANGE REPLICATION SOURCE TO SOURCE_LOG_FILE='binlog.000233', SOURCE_LOG_POS=314582450;\n\
\n\
--\n\
-- Current Database: `mysql`\n\
--\n\
\n\
CREATE DATABASE /*!32312 IF NOT EXISTS*/ `mysql` /*!40100 DEFAULT CHARACTER SET utf8mb4 */;\n";

    /// Collects what passes.
    #[derive(Default)]
    struct Collect(Vec<u8>, usize);

    #[async_trait::async_trait]
    impl ChunkSink for Collect {
        async fn accept(&mut self, chunk: Bytes) -> Result<()> {
            self.0.extend_from_slice(&chunk);
            self.1 += 1;
            Ok(())
        }
    }

    fn expected_mysql() -> String {
        MYSQL_HEAD
            .replace(
                "\nSET @@SESSION.SQL_LOG_BIN= 0;",
                "\n-- SET @@SESSION.SQL_LOG_BIN= 0;",
            )
            .replace(
                "\nSET @@GLOBAL.GTID_PURGED=/*!80000 '+'*/ '7664fad8-49fd-11e8-a546-4201c0a8010a:1-766741,\n90e79fc1",
                "\n-- SET @@GLOBAL.GTID_PURGED=/*!80000 '+'*/ '7664fad8-49fd-11e8-a546-4201c0a8010a:1-766741,\n-- 90e79fc1",
            )
    }

    #[test]
    fn mysql_heads_lose_what_keeps_the_load_out_of_the_binlog() {
        let out = String::from_utf8(rewrite_head(MYSQL_HEAD.as_bytes())).unwrap();
        assert_eq!(out, expected_mysql());
        // Restoring the saved value at the end (1 for this session) stays.
        assert!(out.contains("\nSET @MYSQLDUMP_TEMP_LOG_BIN = @@SESSION.SQL_LOG_BIN;\n"));
    }

    #[test]
    fn heads_without_them_are_unchanged() {
        let maria = "-- MariaDB dump 10.19  Distrib 10.11.6-MariaDB\n\
/*!40101 SET @OLD_SQL_MODE=@@SQL_MODE, SQL_MODE='NO_AUTO_VALUE_ON_ZERO' */;\n\
-- CHANGE MASTER TO MASTER_USE_GTID=slave_pos;\n\
-- SET GLOBAL gtid_slave_pos='0-1-2';\n\
\n\
--\n\
-- Current Database: `mysql`\n";
        assert_eq!(rewrite_head(maria.as_bytes()), maria.as_bytes());
        assert_eq!(
            rewrite_head(b"no newline at the end"),
            b"no newline at the end"
        );
    }

    #[tokio::test]
    async fn the_sink_rewrites_the_head_across_chunks_and_nothing_after_it() {
        let body = "INSERT INTO t VALUES ('SET @@SESSION.SQL_LOG_BIN= 0;');\n\
SET @@SESSION.SQL_LOG_BIN= 0;\n";
        let dump = format!("{MYSQL_HEAD}{body}");
        for chunk_size in [1, 7, 100, 4096] {
            let mut sink = BinloggedLoad::new(Collect::default());
            for chunk in dump.as_bytes().chunks(chunk_size) {
                sink.accept(Bytes::copy_from_slice(chunk)).await.unwrap();
            }
            sink.finish().await.unwrap();
            let got = sink.into_inner();
            assert_eq!(
                String::from_utf8(got.0).unwrap(),
                format!("{}{body}", expected_mysql()),
                "chunks of {chunk_size}"
            );
        }
        // A dump that ends inside its head is passed on by finish.
        let mut sink = BinloggedLoad::new(Collect::default());
        sink.accept(Bytes::from_static(b"SET @@SESSION.SQL_LOG_BIN= 0;\n"))
            .await
            .unwrap();
        assert_eq!(sink.inner.1, 0);
        sink.finish().await.unwrap();
        sink.finish().await.unwrap();
        assert_eq!(sink.inner.0, b"-- SET @@SESSION.SQL_LOG_BIN= 0;\n");
        assert_eq!(sink.inner.1, 1);
        // As dumped: nothing held, nothing changed.
        let mut sink = BinloggedLoad::as_dumped(Collect::default());
        sink.accept(Bytes::from(dump.clone())).await.unwrap();
        assert_eq!(sink.inner.0, dump.as_bytes());
        sink.finish().await.unwrap();
        assert_eq!(sink.inner.1, 1);
    }
}
