#include "errors/kmsg_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "core/fd.h"
#include "core/system.h"

namespace gpuscope {
namespace {

// Far above a printk record (1024 bytes of text and its dictionary): /dev/kmsg refuses a read
// into a buffer too small for the record with EINVAL.
constexpr size_t kRecordMax = 8192;
// A poll returns after this many records even if more wait, so a flooded log cannot hold it.
constexpr int kMaxPerPoll = 1 << 16;

class DevKmsg : public KmsgSource {
 public:
  explicit DevKmsg(int fd) : fd_(fd) {}
  ssize_t read_record(char* buf, size_t size) override {
    ssize_t n = ::read(fd_.get(), buf, size);
    return n < 0 ? -errno : n;
  }
  bool rewind() override { return lseek(fd_.get(), 0, SEEK_SET) >= 0; }

 private:
  Fd fd_;
};

// A saved log, one line per record; a line longer than kRecordMax is cut there.
class LogFile : public KmsgSource {
 public:
  explicit LogFile(int fd) : fd_(fd) {}
  ssize_t read_record(char* out, size_t size) override {
    size_t cap = std::min(size, kRecordMax);
    for (;;) {
      auto begin = buf_.begin() + static_cast<ptrdiff_t>(start_);
      auto nl = std::find(begin, buf_.end(), '\n');
      size_t avail = static_cast<size_t>(nl - begin);
      bool complete = nl != buf_.end();
      if (complete || avail >= cap || (eof_ && avail > 0)) {
        size_t len = std::min(avail, cap);
        bool skip = dropping_ || len == 0;
        if (complete) {
          start_ += avail + 1;
          dropping_ = false;
        } else if (avail >= cap) {
          start_ += len;
          dropping_ = true;  // the rest of this line, up to its newline, is skipped
        } else {
          start_ += avail;
          dropping_ = false;
        }
        if (skip) continue;
        std::memcpy(out, &*begin, len);
        return static_cast<ssize_t>(len);
      }
      if (eof_) {
        eof_ = false;  // a file that grows is read on from here by the next poll
        return 0;
      }
      if (dropping_) start_ = buf_.size();
      buf_.erase(buf_.begin(), buf_.begin() + static_cast<ptrdiff_t>(start_));
      start_ = 0;
      char chunk[65536];
      ssize_t n = ::read(fd_.get(), chunk, sizeof chunk);
      if (n < 0) return -errno;
      if (n == 0) eof_ = true;
      buf_.insert(buf_.end(), chunk, chunk + n);
    }
  }
  bool rewind() override {
    buf_.clear();
    start_ = 0;
    eof_ = dropping_ = false;
    return lseek(fd_.get(), 0, SEEK_SET) == 0;
  }

 private:
  Fd fd_;
  std::vector<char> buf_;
  size_t start_ = 0;
  bool eof_ = false, dropping_ = false;
};

std::string this_boot_id() {
  std::string id = read_file("/proc/sys/kernel/random/boot_id");
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

}  // namespace

std::unique_ptr<KmsgReader> KmsgReader::open(const KmsgOptions& o, std::string* err) {
  auto fail = [&](const std::string& why) {
    if (err) *err = fmt::format("cannot read {}: {}", o.path, why);
    return nullptr;
  };
  struct stat st {};
  if (stat(o.path.c_str(), &st) != 0) return fail(strerror(errno));
  bool device = S_ISCHR(st.st_mode);
  if (!device && !S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) return fail("not the kernel log or a file");
  int fd = ::open(o.path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fail(strerror(errno));
  if (!device) {
    auto src = std::make_unique<LogFile>(fd);
    auto r = std::make_unique<KmsgReader>(std::move(src), o.state_path, "");
    r->fd_ = fd;
    r->lines_ = true;
    return r;
  }
  auto src = std::make_unique<DevKmsg>(fd);
  auto r = std::make_unique<KmsgReader>(std::move(src), o.state_path, this_boot_id());
  // Resuming (or a state of an earlier boot): everything the kernel still holds, the saved ones
  // skipped; otherwise from now on, or from where `dmesg -c` last cleared (SEEK_DATA).
  int whence = r->saved_ || r->stats_.restarted ? SEEK_SET : o.from_start ? SEEK_DATA : SEEK_END;
  if (lseek(fd, 0, whence) < 0) return fail(fmt::format("not the kernel log ({})", strerror(errno)));
  r->fd_ = fd;
  return r;
}

KmsgReader::KmsgReader(std::unique_ptr<KmsgSource> src, std::string state_path, std::string boot_id)
    : src_(std::move(src)), state_path_(std::move(state_path)), boot_id_(std::move(boot_id)) {
  load_state();
}

KmsgReader::~KmsgReader() = default;

// The state file: "BOOT_ID SEQ\n" ("-" for a replayed file, which has no boot).
void KmsgReader::load_state() {
  if (state_path_.empty()) return;
  auto text = read_file_opt(state_path_);
  if (!text) return;
  char id[64] = {};
  unsigned long long seq = 0;
  char end = 0;
  if (text->size() > 200 || sscanf(text->c_str(), "%63s %llu%c", id, &seq, &end) != 3 || end != '\n') return;
  std::string boot = boot_id_.empty() ? "-" : boot_id_;
  if (boot != id) {
    stats_.restarted = true;
    return;
  }
  saved_ = last_ = written_ = seq;
}

void KmsgReader::save_state() {
  if (state_path_.empty() || !last_ || last_ == written_) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(state_path_).parent_path(), ec);
  try {
    write_file_atomic(state_path_, fmt::format("{} {}\n", boot_id_.empty() ? "-" : boot_id_, *last_));
    written_ = last_;
    state_error_.clear();
  } catch (const std::exception& e) {
    state_error_ = e.what();
  }
}

void KmsgReader::take(std::string_view record, std::vector<XidEvent>& out) {
  auto rec = parse_kmsg_record(record);
  if (rec) {
    newest_ = std::max(newest_.value_or(0), rec->seq);
    if (last_ && rec->seq <= *last_) {
      stats_.skipped++;
      return;
    }
    if (last_ && rec->seq > *last_ + 1) stats_.lost += rec->seq - *last_ - 1;
    last_ = rec->seq;
  }
  stats_.records++;
  auto e = lines_ ? parse_xid_line(record) : parse_xid_record(record);
  if (!e) return;
  stats_.xids++;
  out.push_back(std::move(*e));
}

std::vector<XidEvent> KmsgReader::drain() {
  std::vector<XidEvent> out;
  read_error_.clear();
  at_end_ = false;
  std::vector<char> buf(kRecordMax);
  for (int i = 0; i < kMaxPerPoll; i++) {
    ssize_t n = src_->read_record(buf.data(), buf.size());
    if (n > 0) {
      take(std::string_view(buf.data(), static_cast<size_t>(n)), out);
    } else if (n == 0) {
      at_end_ = true;
      break;
    } else if (n == -EPIPE) {
      // Our next record was overwritten; the read after it gives the oldest one left, and the
      // gap in sequence numbers says how many went.
      stats_.overruns++;
    } else if (n != -EINTR) {
      if (n != -EAGAIN) read_error_ = strerror(static_cast<int>(-n));
      break;
    }
  }
  return out;
}

std::vector<XidEvent> KmsgReader::poll() {
  bool first = !polled_;
  polled_ = true;
  uint64_t xids = stats_.xids;
  auto out = drain();
  // A saved number beyond every record the kernel holds is of an earlier boot: start over.
  if (first && saved_ && newest_ && *newest_ < *saved_ && src_->rewind()) {
    stats_ = KmsgStats{};
    stats_.restarted = true;
    saved_.reset();
    last_.reset();
    newest_.reset();
    out = drain();
  }
  if (stats_.xids != xids || (first && stats_.restarted)) save_state();
  return out;
}

}  // namespace gpuscope
