// How a recipe becomes a workspace (EnvSpec::recipe_mode): its own header, so that the
// protocol's parser (and the static `sandgate` front, cli/front_main.cc) need nothing else of
// providers/workspace.h.
#pragma once

#include <string>

#include "core/result.h"

namespace sandgate::providers {

enum class RecipeMode {
  kAuto,     // copy-on-write where possible, else a copy
  kOverlay,  // copy-on-write or an error saying why not
  kCopy,     // always a copy
};
std::string to_string(RecipeMode m);
Result<RecipeMode> parse_recipe_mode(const std::string& s);

}  // namespace sandgate::providers
