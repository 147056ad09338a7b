/* The pod sandbox's init: holds the namespaces open, reaps zombies, exits on
 * SIGINT/SIGTERM. Built static so the pause image is one file. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) { (void)sig; _exit(0); }
static void on_chld(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
  struct sigaction term = {.sa_handler = on_term}, chld = {.sa_handler = on_chld, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &term, NULL);
  sigaction(SIGTERM, &term, NULL);
  sigaction(SIGCHLD, &chld, NULL);
  for (;;) pause();
}
