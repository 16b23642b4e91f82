// A ps state file (save_state / restore_state, docs/ps.md): the header decoded on its own,
// then the whole file restored into a ps whose model has the layout the header claims (so
// the restore gets past the layout check and reads the floats).
#include "fuzz_support.h"
#include "ps/layout.h"
#include "ps/ps_state.h"
#include "ps/state_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  std::string file(fuzz::as_view(data, size));
  ps::StateHeader header;
  size_t floats_at = 0;
  try {
    header = ps::decode_state(file, floats_at);
  } catch (const Error&) {
    return 0;
  }
  fuzz::expect_chorus_errors([&] {
    ps::check_config(header.config);
    if (ps::checked_elements(header.part) > (int64_t{1} << 16)) return;  // keep it small
    auto model = ps::PsState::new_model(header.part, header.config);
    for (size_t i = 0; i < model->shards.size(); ++i) {
      model->shards[i]->values.resize(static_cast<size_t>(header.part.shards[i].length));
    }
    ps::PsState::size_slots(*model);
    ps::PsState state;
    state.install(std::move(model));
    state.restore(file);
    state.save();
  });
  return 0;
}
