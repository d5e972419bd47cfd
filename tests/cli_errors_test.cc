// End-to-end tests of the `phi4mm` command-line tool (suite CliErrors): the built binary
// (PHI4MM_CLI_PATH) is run as a subprocess with posix_spawn, its stdin fed from a file and its
// stdout/stderr captured to files. Bad input must exit non-zero (never by a signal) with a
// "phi4mm: error:" line naming the problem and no answer on stdout; a few good invocations check
// that run, tokenize and info --json succeed and print what they promise.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"

extern char** environ;

namespace phi4mm {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  bool spawned = false;
  bool signaled = false;
  int signal = 0;
  int exit_code = -1;
  std::string out, err;
};

std::string Describe(const CliResult& r) {
  return "exit " + std::to_string(r.exit_code) + (r.signaled ? " (killed by signal " + std::to_string(r.signal) + ")" : "") +
         "\n--- stdout ---\n" + r.out.substr(0, 2000) + "\n--- stderr ---\n" + r.err.substr(0, 2000);
}

// Runs the CLI with `args`, feeding `input` on stdin, with `env` ("NAME=value") added to the
// environment.
CliResult RunCli(const std::vector<std::string>& args, const std::string& input = "",
                 const std::vector<std::string>& env = {}) {
  static int counter = 0;
  const std::string dir = test::TempDir("cli_run_" + std::to_string(counter++));
  const std::string in_path = dir + "/stdin", out_path = dir + "/stdout", err_path = dir + "/stderr";
  test::WriteFile(in_path, input);

  std::vector<std::string> argv_s = {PHI4MM_CLI_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, in_path.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CliResult r;
  pid_t pid = 0;
  std::vector<std::string> env_s = env;
  for (char** e = environ; *e; ++e) env_s.push_back(*e);  // the first of a name wins
  std::vector<char*> envp;
  for (std::string& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << argv[0] << ": " << std::strerror(rc);
    return r;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.spawned = true;
  if (WIFSIGNALED(status)) {
    r.signaled = true;
    r.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  }
  r.out = test::ReadFile(out_path);
  r.err = test::ReadFile(err_path);
  fs::remove_all(dir);
  return r;
}

bool OnlyWhitespace(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// A failed command: non-zero exit by itself, "phi4mm: error:" with every needle, no answer.
void ExpectCliError(const CliResult& r, std::initializer_list<std::string> needles, int exit_code = 1) {
  ASSERT_TRUE(r.spawned);
  ASSERT_FALSE(r.signaled) << "crashed: " << Describe(r);
  EXPECT_EQ(r.exit_code, exit_code) << Describe(r);
  EXPECT_NE(r.err.find("phi4mm: error:"), std::string::npos) << Describe(r);
  for (const std::string& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << "stderr lacks '" << n << "'\n" << Describe(r);
  EXPECT_TRUE(OnlyWhitespace(r.out)) << "printed an answer on failure: " << Describe(r);
  EXPECT_EQ(r.err.find("AddressSanitizer"), std::string::npos) << Describe(r);
  EXPECT_EQ(r.err.find("runtime error"), std::string::npos) << Describe(r);
}

std::string Orig() { return test::FixturePath("tiny/orig"); }

std::string CopyOrig(const std::string& name) {
  const std::string dir = test::TempDir(name) + "/orig";
  test::CopyDir(Orig(), dir);
  return dir;
}

TEST(CliErrors, MissingModelFolder) {
  const std::string dir = test::TempDir("cli_missing") + "/not/here";
  ExpectCliError(RunCli({"run", "-m", dir, "-p", "hi", "-n", "2"}), {dir, "does not exist"});
  ExpectCliError(RunCli({"info", "-m", dir}), {dir, "does not exist"});
}

TEST(CliErrors, CorruptShard) {
  const std::string dir = CopyOrig("cli_corrupt");
  const std::string shard = dir + "/model-00002-of-00003.safetensors";
  fs::resize_file(shard, fs::file_size(shard) / 2);
  ExpectCliError(RunCli({"run", "-m", dir, "-p", "hi", "-n", "2"}), {"model-00002-of-00003.safetensors", "truncated"});
}

TEST(CliErrors, UnknownModelType) {
  const std::string dir = CopyOrig("cli_llama");
  auto j = nlohmann::json::parse(test::ReadFile(dir + "/config.json"));
  j["model_type"] = "llama";
  test::WriteFile(dir + "/config.json", j.dump());
  ExpectCliError(RunCli({"run", "-m", dir, "-p", "hi"}), {"'llama'", "config.json"});
  ExpectCliError(RunCli({"info", "-m", dir, "--json"}), {"'llama'"});
}

TEST(CliErrors, MalformedConfigJson) {
  const std::string dir = CopyOrig("cli_badjson");
  test::WriteFile(dir + "/config.json", "{\"model_type\": \"phi4mm\", ");
  ExpectCliError(RunCli({"run", "-m", dir, "-p", "hi"}), {"malformed JSON", dir + "/config.json"});
}

TEST(CliErrors, InvalidUtf8Prompt) {
  ExpectCliError(RunCli({"run", "-m", Orig(), "-p", "-", "-n", "2"}, std::string("hello \xff\xfe world")),
                 {"UTF-8", "0xFF"});
}

TEST(CliErrors, PromptLongerThanContext) {
  std::string prompt;
  for (int i = 0; i < 3000; ++i) prompt += (i % 2 ? "zebra " : "marmalade ");
  ExpectCliError(RunCli({"run", "-m", Orig(), "-p", "-", "-n", "2"}, prompt), {"context holds 512", "tokens"});
}

TEST(CliErrors, BadSamplingFlags) {
  ExpectCliError(RunCli({"run", "-m", Orig(), "-p", "hi", "--top-p", "0"}), {"top-p"});
  ExpectCliError(RunCli({"run", "-m", Orig(), "-p", "hi", "--temperature", "-1"}), {"temperature"});
  ExpectCliError(RunCli({"run", "-m", Orig(), "-p", "hi", "--min-p", "1.5"}), {"min-p"});
  ExpectCliError(RunCli({"run", "-m", Orig(), "-p", "hi", "--lora", "audio"}), {"--lora", "'audio'"});
}

TEST(CliErrors, BadBenchConcurrencyFlags) {
  const std::vector<std::string> bench = {"bench", "-m", Orig(), "-t", "1", "--prompt-tokens", "4", "--decode-tokens", "2",
                                          "--vision-crops", "0"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = bench;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  ExpectCliError(RunCli(with({"--concurrency", "2", "--rounds", "0"})), {"--rounds >= 1"});
  ExpectCliError(RunCli(with({"--concurrency", "2", "--rounds", "-3"})), {"--rounds >= 1"});
  ExpectCliError(RunCli(with({"--concurrency", "0"})), {"--concurrency", "'0'"});
  ExpectCliError(RunCli(with({"--concurrency", "2,x"})), {"--concurrency", "'2,x'"});
}

TEST(CliErrors, BadIdsAndExportFlags) {
  ExpectCliError(RunCli({"run", "-m", Orig(), "--ids", "1,x,3"}), {"--ids", "'x'"});
  ExpectCliError(RunCli({"run", "-m", Orig(), "--ids", "1,,3"}), {"--ids"});
  ExpectCliError(RunCli({"run", "-m", Orig(), "--ids", "999999", "-n", "1"}), {"999999", "vocabulary"});
  ExpectCliError(RunCli({"run", "-m", Orig(), "-p", "hi", "--processor-tensors", "."}), {"--processor-tensors", "--ids"});
  ExpectCliError(RunCli({"run", "-m", Orig(), "--ids", "1,2", "--processor-tensors", Orig() + "/nope"}), {"nope"});
  const std::string out = test::TempDir("cli_export_flags");
#ifdef PHI4MM_HAVE_EXPORT
  ExpectCliError(RunCli({"export", "-m", Orig(), "-o", out, "--precision", "fp8"}), {"--precision", "'fp8'"});
  ExpectCliError(RunCli({"export", "-m", Orig(), "-o", out, "--lora", "merged"}), {"--lora", "'merged'"});
  ExpectCliError(RunCli({"export", "-m", Orig(), "-o", out, "--target", "tpu"}), {"--target", "'tpu'"});
  ExpectCliError(RunCli({"export", "-m", Orig() + "/nope", "-o", out}), {"nope"});
  // The tiny fixture's head size (8) is one ONNX Runtime's GroupQueryAttention cannot run: refused
  // before anything is written, unless asked for.
  const std::string unrunnable = out + "/unrunnable";
  ExpectCliError(RunCli({"export", "-m", Orig(), "-o", unrunnable}), {"head size is 8", "multiple of 16", "--allow-unrunnable"});
  EXPECT_FALSE(std::filesystem::exists(unrunnable));
#else
  ExpectCliError(RunCli({"export", "-m", Orig(), "-o", out}), {"libonnx-dev"});
#endif
}

TEST(CliErrors, RunWithIdsWritesLogitsPerStep) {
  const std::string dump = test::TempDir("cli_run_ids");
  const CliResult r = RunCli({"run", "-m", Orig(), "--ids", "24912,2375", "--lora", "speech", "-n", "3", "-t", "1",
                              "--dump", dump});
  ASSERT_FALSE(r.signaled) << Describe(r);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  for (const char* f : {"/prefill.logits.npy", "/step.1.logits.npy", "/step.2.logits.npy", "/input_ids.npy"})
    EXPECT_TRUE(std::filesystem::exists(dump + f)) << f;
}

// Usage errors exit 2 with one "phi4mm: error:" line naming the problem.
TEST(CliErrors, UnknownSubcommandExits2) {
  const CliResult r = RunCli({"frobnicate", "-m", Orig()});
  ASSERT_FALSE(r.signaled) << Describe(r);
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_NE(r.err.find("phi4mm: error: unknown command 'frobnicate'"), std::string::npos) << Describe(r);
  EXPECT_TRUE(OnlyWhitespace(r.out)) << Describe(r);
  const CliResult no_prompt = RunCli({"run", "-m", Orig()});
  EXPECT_EQ(no_prompt.exit_code, 2) << Describe(no_prompt);
  EXPECT_NE(no_prompt.err.find("--ids"), std::string::npos) << Describe(no_prompt);
  const CliResult none = RunCli({});
  ASSERT_FALSE(none.signaled) << Describe(none);
  EXPECT_EQ(none.exit_code, 2) << Describe(none);
  const CliResult bad_flag = RunCli({"run", "-m", Orig(), "-p", "hi", "--no-such-flag"});
  ASSERT_FALSE(bad_flag.signaled) << Describe(bad_flag);
  EXPECT_EQ(bad_flag.exit_code, 2) << Describe(bad_flag);
  EXPECT_NE(bad_flag.err.find("--no-such-flag"), std::string::npos) << Describe(bad_flag);
  EXPECT_TRUE(OnlyWhitespace(bad_flag.out)) << Describe(bad_flag);
}

TEST(CliErrors, RunSucceedsOnTinyModel) {
  const CliResult r = RunCli({"run", "-m", Orig(), "-p", "hi", "-n", "3", "-t", "1"});
  ASSERT_FALSE(r.signaled) << Describe(r);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.err.find("error"), std::string::npos) << Describe(r);
}

// --speculative ngram prints the same answer and reports its drafts; a bad mode is refused.
TEST(CliErrors, SpeculativeRunPrintsTheSameAnswer) {
  const std::vector<std::string> base = {"run", "-m", Orig(), "-p", "a b c a b c a b c", "-n", "40", "-v"};
  std::vector<std::string> spec = base;
  spec.insert(spec.end(), {"--speculative", "ngram", "--draft-max", "4"});
  const CliResult plain = RunCli(base), fast = RunCli(spec);
  ASSERT_EQ(plain.exit_code, 0) << Describe(plain);
  ASSERT_EQ(fast.exit_code, 0) << Describe(fast);
  EXPECT_EQ(fast.out, plain.out);
  EXPECT_NE(fast.err.find("drafted tokens accepted"), std::string::npos) << fast.err;
  ExpectCliError(RunCli({"run", "-m", Orig(), "-p", "hi", "--speculative", "eagle"}), {"--speculative", "eagle"}, 2);
  ExpectCliError(RunCli({"run", "-m", Orig(), "-p", "hi", "--draft-max", "99"}), {"--draft-max"}, 2);
}

TEST(CliErrors, TokenizePrintsIds) {
  const CliResult r = RunCli({"tokenize", "-m", Orig(), "--text", "hello world"});
  ASSERT_FALSE(r.signaled) << Describe(r);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out, "[24912,2375]\n") << Describe(r);
}

// PHI4MM_ISA: `info` names the table it forces; a misspelled one, or one the build or CPU lacks,
// is a clear error before any work.
TEST(CliErrors, IsaOverrideIsShownOrRefused) {
  const CliResult r = RunCli({"info", "-m", Orig(), "--json", "-t", "1"}, "", {"PHI4MM_ISA=scalar"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  EXPECT_EQ(j["kernels"]["isa"], "scalar") << j.dump(2);
  EXPECT_EQ(j["kernels"]["available"][0], "scalar") << j.dump(2);
  ExpectCliError(RunCli({"info", "-m", Orig()}, "", {"PHI4MM_ISA=avx3"}), {"PHI4MM_ISA=avx3", "scalar, avx2"});
  ExpectCliError(RunCli({"run", "-m", Orig(), "-p", "hi", "-n", "2"}, "", {"PHI4MM_ISA=avx3"}), {"PHI4MM_ISA=avx3"});
#if defined(__x86_64__)
  ExpectCliError(RunCli({"info", "-m", Orig()}, "", {"PHI4MM_ISA=neon"}), {"PHI4MM_ISA=neon", "this build"});
#elif defined(__aarch64__)
  ExpectCliError(RunCli({"info", "-m", Orig()}, "", {"PHI4MM_ISA=avx2"}), {"PHI4MM_ISA=avx2", "this build"});
#endif
}

TEST(CliErrors, InfoJsonParses) {
  const CliResult r = RunCli({"info", "-m", Orig(), "--json", "-t", "1"});
  ASSERT_FALSE(r.signaled) << Describe(r);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  EXPECT_NE(j["layout"].get<std::string>().find("original"), std::string::npos) << j.dump(2);
  EXPECT_EQ(j["model_type"], "phi4mm");
  EXPECT_EQ(j["files"], 3);
  EXPECT_EQ(j["context_length"], 512);
  EXPECT_EQ(j["parameters"]["embedding"].get<int64_t>(), 200064 * 48);
  // 3 layers of qkv [80,48], o [48,48], gate_up [128,48], down [48,64], two norms [48]; final norm.
  EXPECT_EQ(j["parameters"]["decoder"].get<int64_t>(), 3 * (80 * 48 + 48 * 48 + 128 * 48 + 48 * 64 + 2 * 48) + 48);
  EXPECT_GT(j["parameters"]["vision_lora"].get<int64_t>(), 0);
  EXPECT_GT(j["parameters"]["speech_lora"].get<int64_t>(), 0);
  EXPECT_GT(j["parameters"]["vision"].get<int64_t>(), 0);
  EXPECT_GT(j["parameters"]["speech"].get<int64_t>(), 0);
  EXPECT_GT(j["parameters_by_dtype"]["BF16"].get<int64_t>(), 0);
}

}  // namespace
}  // namespace phi4mm
