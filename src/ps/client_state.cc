// PsClient::save_state / restore_state: one state file per ps (state_file.h). restore
// checks every file against the layout before sending anything, so a wrong or truncated
// file is an InvalidArgument here rather than a dropped connection at the ps.
#include <set>

#include "chorus/ps/client.h"
#include "client_impl.h"
#include "optimizer_kernels.h"
#include "state_file.h"

namespace chorus::ps {
namespace {

std::string file_name(int ps) { return "ps-" + std::to_string(ps); }

void check_file(const PsConnection& conn, const std::string& name, const std::string& file) {
  size_t floats_at = 0;
  StateHeader h = decode_state(file, floats_at);
  CHORUS_CHECK_ARG(same_layout(h.part, conn.part), "restore_state: file '", name, "' holds ps ",
                   h.part.ps_index, " of ", h.part.num_ps, " with another layout than ",
                   conn.name(), " (a checkpoint of a different model or partition)");
  CHORUS_CHECK_ARG(h.config.optimizer.kind == conn.config.optimizer.kind &&
                       slot_count(h.config.optimizer) == slot_count(conn.config.optimizer),
                   "restore_state: file '", name, "' was written with another optimizer");
}

}  // namespace

std::map<std::string, std::string> PsClient::save_state() {
  impl_->require_layout("save_state");
  std::vector<std::string> files(impl_->ps.size());
  impl_->each([&](PsConnection& conn) {
    conn.send(wire::Type::kSave, {});
    // The layout fixes the file's size exactly: any other size is refused (as a broken
    // connection) before anything is allocated for it.
    const uint64_t bytes = state_file_size(conn.part, conn.config);
    conn.receive(bytes);
    std::string& file = files[static_cast<size_t>(conn.index())];
    file.resize(static_cast<size_t>(bytes));
    conn.recv_bulk({{file.data(), file.size()}});
  });
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < files.size(); ++i)
    out[file_name(static_cast<int>(i))] = std::move(files[i]);
  return out;
}

void PsClient::restore_state(const std::map<std::string, std::string>& files) {
  impl_->require_layout("restore_state");
  std::set<std::string> expected;
  for (auto& conn : impl_->ps) {
    std::string name = file_name(conn->index());
    auto it = files.find(name);
    CHORUS_CHECK_ARG(it != files.end(), "restore_state: no file '", name, "' for ", conn->name());
    check_file(*conn, name, it->second);
    expected.insert(name);
  }
  for (const auto& [name, bytes] : files) {
    CHORUS_CHECK_ARG(expected.count(name) == 1, "restore_state: unexpected file '", name,
                     "' (this job has ", impl_->ps.size(), " parameter servers)");
  }
  impl_->each([&](PsConnection& conn) {
    const std::string& file = files.at(file_name(conn.index()));
    conn.send(wire::Type::kRestore, {}, {{file.data(), file.size()}});
    conn.receive_meta();
  });
}

}  // namespace chorus::ps
