"""Image pulls on the agents: one per agent and image, however many wait for it.

A pull is a task of its own (not of the session that asked first): every session and
``troupe image pull`` that needs the same image on the same agent awaits that one task, and
a waiter that gives up (a destroyed session) does not stop it for the others. Each pull has
its own time limit (``troupe server --pull-timeout``), apart from the create time-out. The
agent gets the registry's credentials and CA with the request (:class:`PullRequest`) over
its authenticated channel; they are never logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from troupe.api.agent import AgentBackend
from troupe.api.errors import AgentFailed, TroupeError
from troupe.api.registries import PullProgress, PullRequest, registry_of
from troupe.manager.registries import RegistryBook

log = logging.getLogger(__name__)
Key = tuple[str, str]


class Pulls:
    def __init__(
        self, agent: Callable[[str], AgentBackend], book: RegistryBook, timeout: float
    ) -> None:
        self._agent = agent
        self.book = book
        self.timeout = timeout
        self._tasks: dict[Key, asyncio.Task[PullProgress]] = {}
        self._progress: dict[Key, PullProgress] = {}

    def progress(self, agent_id: str, image: str) -> PullProgress | None:
        """Where the pull of ``image`` on ``agent_id`` stands (None: none is running)."""
        return self._progress.get((agent_id, image))

    async def pull(self, agent_id: str, image: str) -> PullProgress:
        """Pulls ``image`` on ``agent_id``, joining the pull under way if there is one."""
        key = (agent_id, image)
        task = self._tasks.get(key)
        if task is None:
            self._progress[key] = PullProgress(agent=agent_id, image=image)
            task = self._tasks[key] = asyncio.create_task(self._run(key))
            task.add_done_callback(lambda t: self._ended(key, t))
        return await asyncio.shield(task)

    async def ensure(self, agent_id: str, image: str) -> bool:
        """Pulls ``image`` on ``agent_id`` unless the agent has it; True if it was pulled."""
        if (agent_id, image) not in self._tasks and await self._agent(agent_id).has_image(image):
            return False
        await self.pull(agent_id, image)
        return True

    def _ended(self, key: Key, task: asyncio.Task[PullProgress]) -> None:
        self._tasks.pop(key, None)
        self._progress.pop(key, None)
        if not task.cancelled():
            task.exception()  # (retrieved: every waiter may have gone)

    async def _run(self, key: Key) -> PullProgress:
        agent_id, image = key
        registry = registry_of(image)
        auth, ca = self.book.auth(registry)
        req = PullRequest(image=image, auth=auth, ca_pem=ca)
        log.info("pulling %s on agent %s (registry %s)", image, agent_id, registry)
        last = self._progress[key]
        try:
            async with asyncio.timeout(self.timeout):
                async for p in self._agent(agent_id).pull_image(req):
                    self._progress[key] = last = p
        except TimeoutError:
            raise AgentFailed(
                f"pulling {image} from {registry} on agent {agent_id}: not done after"
                f" {self.timeout:g} s (troupe server --pull-timeout)",
                field="image",
            ) from None
        except TroupeError as e:
            log.warning("pull of %s on agent %s failed: %s", image, agent_id, e)
            raise
        if not last.done:
            raise AgentFailed(f"pulling {image} on agent {agent_id}: the agent did not finish")
        log.info("pulled %s on agent %s (%d bytes)", image, agent_id, last.total_bytes)
        return last
