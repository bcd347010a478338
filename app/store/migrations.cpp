#include "app/store/migrations.h"

namespace spw::app {
namespace {

constexpr Migration kMigrations[] = {
#include "spillway_migrations.inc"
};

}  // namespace

std::span<const Migration> migrations() { return kMigrations; }

}  // namespace spw::app
