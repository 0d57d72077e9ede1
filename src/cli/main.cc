// TODO: CLI
#include <fmt/core.h>
int main() { fmt::print("collage\n"); }
