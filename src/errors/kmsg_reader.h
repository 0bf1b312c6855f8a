#pragma once
// The kernel log as a source of Xid events: /dev/kmsg read without blocking, one record per
// read(), with the records that were overwritten before they were read counted (EPIPE and gaps
// in the sequence numbers), and the last sequence number kept in a state file so that a restart
// does not report the same Xid twice. A regular file (a saved log) is replayed line by line:
// kmsg records as /dev/kmsg gives them, and dmesg, journalctl -k or syslog lines.
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "errors/xid.h"

namespace gpuscope {

// What read() on /dev/kmsg gives, as a seam for tests: one record (its length), 0 at the end of
// a file, or -errno: -EAGAIN when nothing waits, -EPIPE when the next record was overwritten.
class KmsgSource {
 public:
  virtual ~KmsgSource() = default;
  virtual ssize_t read_record(char* buf, size_t size) = 0;
  // Back to the oldest record the kernel still holds; false where that is impossible.
  virtual bool rewind() = 0;
};

struct KmsgOptions {
  std::string path = "/dev/kmsg";
  // Where the last sequence number is kept ("" keeps none), e.g. /var/lib/gpuscope/kmsg.seq.
  std::string state_path;
  // /dev/kmsg without a saved state: also the records already in the buffer (as dmesg shows
  // them), not only those written from now on.
  bool from_start = false;
};

struct KmsgStats {
  uint64_t records = 0;    // read and new
  uint64_t xids = 0;       // of them, Xid events
  uint64_t lost = 0;       // overwritten in the kernel's buffer before they were read (seq gaps)
  uint64_t overruns = 0;   // reads that failed with EPIPE
  uint64_t skipped = 0;    // at or before the saved sequence number: reported before a restart
  bool restarted = false;  // the saved state was of an earlier boot: read from the start
};

class KmsgReader {
 public:
  // /dev/kmsg (a character device) or a file to replay; nullptr with `err` set to one line
  // ("cannot read /dev/kmsg: Permission denied") where it cannot be opened.
  static std::unique_ptr<KmsgReader> open(const KmsgOptions& o, std::string* err);
  // The test seam: records from `src`, the state in `state_path` ("" for none), `boot_id` what
  // the state file must name to be of this boot.
  KmsgReader(std::unique_ptr<KmsgSource> src, std::string state_path, std::string boot_id);
  ~KmsgReader();

  // Everything waiting now, never blocking: the Xid events among the new records. After a poll
  // that found Xid events the state file is written (a failure: state_error()).
  std::vector<XidEvent> poll();
  // A replayed file was read to its end (a later poll reads what was appended since).
  bool at_end() const { return at_end_; }
  // For the event loop (POLLIN on /dev/kmsg); -1 for a test's source.
  int fd() const { return fd_; }
  const KmsgStats& stats() const { return stats_; }
  std::optional<uint64_t> last_seq() const { return last_; }
  // Writes the last sequence number now (poll does it after Xid events): for shutdown.
  void save_state();
  const std::string& state_error() const { return state_error_; }
  // Why the last poll stopped early ("" when it read all there was): a read error other than
  // EAGAIN and EPIPE.
  const std::string& read_error() const { return read_error_; }

 private:
  void load_state();
  std::vector<XidEvent> drain();
  void take(std::string_view record, std::vector<XidEvent>& out);

  std::unique_ptr<KmsgSource> src_;
  std::string state_path_, boot_id_, state_error_, read_error_;
  std::optional<uint64_t> saved_;   // from the state file
  std::optional<uint64_t> last_;    // the newest record taken (or the saved one)
  std::optional<uint64_t> newest_;  // the newest sequence number read, skipped ones too
  std::optional<uint64_t> written_;
  KmsgStats stats_;
  int fd_ = -1;
  bool polled_ = false, at_end_ = false;
  bool lines_ = false;  // a replayed file: lines in any of the formats parse_xid_line reads
};

}  // namespace gpuscope
