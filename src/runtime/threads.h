// Thread counts are parameters, never process state: a session runs with the count it was
// made with, each kernel with the count it was compiled for (CompileOptions::threads).
#pragma once

namespace collage {

// `requested` threads, or every core for 0. Throws Error(kInvalidArgument) when negative.
int resolve_threads(int requested);
int hardware_cores();

// Before a kernel runs on this thread: sets this thread's OpenMP thread count (OpenMP
// keeps it per calling thread, so concurrent steps on other threads keep theirs).
void use_threads_on_this_thread(int threads);

}  // namespace collage
