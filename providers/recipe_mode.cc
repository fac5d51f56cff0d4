#include "providers/recipe_mode.h"

namespace sandgate::providers {

std::string to_string(RecipeMode m) {
  switch (m) {
    case RecipeMode::kAuto:
      return "auto";
    case RecipeMode::kOverlay:
      return "overlay";
    case RecipeMode::kCopy:
      return "copy";
  }
  return "auto";
}

Result<RecipeMode> parse_recipe_mode(const std::string& s) {
  if (s == "auto") return RecipeMode::kAuto;
  if (s == "overlay") return RecipeMode::kOverlay;
  if (s == "copy") return RecipeMode::kCopy;
  return logic_error("recipe mode", "'" + s + "' is not auto, overlay or copy");
}

}  // namespace sandgate::providers
