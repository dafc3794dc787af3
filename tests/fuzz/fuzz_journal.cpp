// libFuzzer target: a checkpoint's journal replay (hdf5_io/src/journal.hpp), run on a file that a
// killed run may have left torn or that may be damaged: whatever follows a valid header and a valid
// record, replay visits the records that are whole and valid and reports the rest as a torn tail or
// damage, never crashing or reading past the file. The file is written by the real JournalWriter,
// then the input appended, in /dev/shm.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "journal.hpp"

using namespace fibra::hdf5_io::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/dev/shm/fibra-fuzz-journal-" + std::to_string(::getpid());
  const JournalKey key{0x1234, 7};
  ::unlink(path.c_str());
  {
    JournalWriter w(path, key);
    const std::vector<std::byte> values(16, std::byte{42});
    w.append(0, 2, values);
    w.flush(false);
  }
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    std::uint64_t sum = 0;
    const JournalScan s = scan_journal(path, key, [&](const JournalRecord& r) {
      for (std::byte b : r.payload) sum += std::to_integer<unsigned>(b);
    });
    if (!s.matches || s.records < 1 || s.valid_bytes > s.file_bytes) __builtin_trap();  // the first record is valid
  } catch (const std::exception&) {
  }
  return 0;
}
