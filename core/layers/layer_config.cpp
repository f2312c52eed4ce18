#include "core/layers/layer_config.h"

namespace ptdp {

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::None: return "none";
    case Recompute::Full: return "full";
    case Recompute::Selective: return "selective";
  }
  return "?";
}

}  // namespace ptdp
