// The handshake (rendezvous/auth.h) and the job secret, over real loopback sockets.
#include "rendezvous/auth.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <future>

#include "chorus/error.h"
#include "test_util.h"

namespace chorus {
namespace {

using std::chrono::milliseconds;

// A connected pair of loopback sockets.
struct SocketPair {
  SocketPair() {
    net::Fd listener = net::listen_tcp("127.0.0.1", 0);
    client = testing::raw_connect(net::local_port(listener.get()));
    server = net::accept_tcp(listener.get(), Deadline::after(milliseconds(5000)));
  }
  net::Fd client, server;
};

// Runs the server side in another thread; returns its exception (or null).
std::future<std::exception_ptr> serve_async(int fd, Secret secret, std::string purpose,
                                            milliseconds timeout = milliseconds(5000)) {
  return std::async(std::launch::async, [=] {
    try {
      rendezvous::authenticate_server(fd, secret, purpose, Deadline::after(timeout));
      return std::exception_ptr();
    } catch (...) {
      return std::current_exception();
    }
  });
}

template <typename E>
std::string rethrow_as(std::exception_ptr e) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const E& expected) {
    return expected.what();
  } catch (const std::exception& other) {
    ADD_FAILURE() << "unexpected exception type: " << other.what();
    return "";
  }
  ADD_FAILURE() << "no exception";
  return "";
}

TEST(Auth, SameSecretAndPurposeSucceedsBothWays) {
  SocketPair p;
  Secret secret = Secret::generate();
  auto server = serve_async(p.server.get(), secret, "store");
  EXPECT_NO_THROW(rendezvous::authenticate_client(p.client.get(), secret, "store",
                                                  Deadline::after(milliseconds(5000))));
  EXPECT_EQ(server.get(), nullptr);
}

TEST(Auth, WrongSecretFailsOnBothEnds) {
  SocketPair p;
  auto server = serve_async(p.server.get(), Secret("server secret"), "peer");
  try {
    rendezvous::authenticate_client(p.client.get(), Secret("client secret"), "peer",
                                    Deadline::after(milliseconds(5000)));
    FAIL() << "handshake with a wrong secret succeeded";
  } catch (const AuthError& e) {
    EXPECT_NE(std::string(e.what()).find("authentication failed (wrong secret?)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NE(rethrow_as<AuthError>(server.get()).find("wrong proof"), std::string::npos);
}

TEST(Auth, PurposeIsBoundIntoTheProof) {
  SocketPair p;
  Secret secret = Secret::generate();
  auto server = serve_async(p.server.get(), secret, "store");
  EXPECT_THROW(rendezvous::authenticate_client(p.client.get(), secret, "peer",
                                               Deadline::after(milliseconds(5000))),
               AuthError);
  rethrow_as<AuthError>(server.get());
}

TEST(Auth, ServerRejectsWrongMagicAndVersionAtOnce) {
  for (std::string hello :
       {std::string("NOPE\x01\x00\x01\x00", 8), std::string("CHAU\x02\x00\x01\x00", 8)}) {
    SocketPair p;
    auto server = serve_async(p.server.get(), Secret("s"), "store");
    testing::send_bytes(p.client.get(), hello);  // only the header: no need to wait for more
    std::string what = rethrow_as<AuthError>(server.get());
    EXPECT_TRUE(what.find("magic") != std::string::npos ||
                what.find("version 2") != std::string::npos)
        << what;
  }
}

TEST(Auth, ClientRejectsAServerThatSpeaksAnotherProtocol) {
  SocketPair p;
  testing::send_bytes(p.server.get(), std::string(40, 'x'));
  EXPECT_THROW(rendezvous::authenticate_client(p.client.get(), Secret("s"), "store",
                                               Deadline::after(milliseconds(5000))),
               AuthError);
}

TEST(Auth, SilentPeerTimesOut) {
  SocketPair p;
  auto start = Clock::now();
  EXPECT_THROW(rendezvous::authenticate_server(p.server.get(), Secret("s"), "store",
                                               Deadline::after(milliseconds(100))),
               TimeoutError);
  EXPECT_GE(testing::seconds_since(start), 0.09);
}

TEST(Auth, EmptySecretIsRefused) {
  SocketPair p;
  EXPECT_THROW(rendezvous::authenticate_client(p.client.get(), Secret(), "store",
                                               Deadline::after(milliseconds(100))),
               InvalidArgument);
}

TEST(Secret, GenerateGivesFreshHexSecrets) {
  Secret a = Secret::generate(), b = Secret::generate();
  EXPECT_EQ(a.bytes().size(), 64u);
  EXPECT_EQ(a.bytes().find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a.bytes(), b.bytes());
}

TEST(Secret, FileReadableByOthersIsRefusedAndOwnerOnlyIsAccepted) {
  testing::TempDir dir;
  std::string path = dir.path() + "/secret";
  std::ofstream(path) << "s3cret\n";
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  try {
    Secret::from_file(path);
    FAIL() << "a 0644 secret file was accepted";
  } catch (const InvalidArgument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("0644"), std::string::npos) << what;
  }
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  EXPECT_THROW(Secret::from_file(path), InvalidArgument);
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  EXPECT_EQ(Secret::from_file(path).bytes(), "s3cret");  // trailing newline dropped
}

TEST(Secret, EmptyOrMissingFileIsRefused) {
  testing::TempDir dir;
  std::string path = dir.path() + "/empty";
  std::ofstream(path).close();
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  EXPECT_THROW(Secret::from_file(path), InvalidArgument);
  EXPECT_THROW(Secret::from_file(dir.path() + "/missing"), InvalidArgument);
}

TEST(Secret, WriteFileCreatesOwnerOnlyFileAndNeverOverwrites) {
  testing::TempDir dir;
  std::string path = dir.path() + "/job.secret";
  Secret secret = Secret::generate();
  secret.write_file(path);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(Secret::from_file(path).bytes(), secret.bytes());
  EXPECT_THROW(Secret::generate().write_file(path), IoError);
  EXPECT_EQ(Secret::from_file(path).bytes(), secret.bytes());
}

TEST(Secret, FromEnvironment) {
  testing::TempDir dir;
  std::string path = dir.path() + "/s";
  Secret("from-file").write_file(path);
  ::unsetenv("CHORUS_SECRET");
  ::unsetenv("CHORUS_SECRET_FILE");
  EXPECT_FALSE(Secret::from_env().has_value());
  ::setenv("CHORUS_SECRET", "from-env", 1);
  EXPECT_EQ(Secret::from_env()->bytes(), "from-env");
  ::setenv("CHORUS_SECRET_FILE", path.c_str(), 1);
  EXPECT_THROW(Secret::from_env(), InvalidArgument);  // ambiguous: both set
  ::unsetenv("CHORUS_SECRET");
  EXPECT_EQ(Secret::from_env()->bytes(), "from-file");
  ::unsetenv("CHORUS_SECRET_FILE");
}

}  // namespace
}  // namespace chorus
