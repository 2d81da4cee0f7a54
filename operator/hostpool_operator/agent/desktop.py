"""The agent in a session's desktop: how long its user has been idle (the X server's own
count, MIT-SCREEN-SAVER), and a message window drawn on its display.

The agent runs as root beside xrdp; each session's X server runs as its user and lets in
only clients with its cookie, which sesman wrote to the file the server was started with
(``-auth FILE``, relative to its working directory). The agent reads that file through
``/proc/PID/cwd`` or ``/proc/PID/root`` (so also from another container of the pod), and
only when it is a regular file of the session's user, no larger than a cookie file gets,
never through a symbolic link. It connects to the display's socket in its own network
namespace (the abstract name), else through the server's file system, and talks only to a
socket whose other end is that very X server process (SO_PEERCRED): a user who binds a
socket of the same name first gets nothing from the agent.

Blocking I/O with timeouts: the agent calls it in threads.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import socket
import stat
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass

from .x11 import (
    ATOM,
    BUTTON_PRESS,
    BUTTON_PRESS_MASK,
    CARDINAL,
    DESTROY_NOTIFY,
    ERROR,
    EXPOSE,
    EXPOSURE_MASK,
    KEY_PRESS,
    KEY_PRESS_MASK,
    MAX_AUTHORITY,
    REPLY,
    SCREEN_SAVER,
    STRING,
    STRUCTURE_NOTIFY_MASK,
    WM_CLASS,
    WM_NAME,
    WM_NORMAL_HINTS,
    WM_SIZE_HINTS,
    FontMetrics,
    Geometry,
    Setup,
    X11Error,
    answer_length,
    atom_of,
    change_property,
    char2b,
    cookie_for,
    create_gc,
    create_window,
    error_text,
    expose_count,
    extension_opcode,
    fill_rectangle,
    font_metrics,
    idle_milliseconds,
    image_text16,
    intern_atom,
    is_close_request,
    map_window,
    open_font,
    parse_setup,
    parse_xauthority,
    query_extension,
    query_text_extents,
    resource_id,
    screen_saver_query_info,
    setup_length,
    setup_request,
    size_hints,
    wrap,
)

log = logging.getLogger(__name__)

#: Seconds any one exchange with an X server may take.
X_TIMEOUT = 3.0
GET_INPUT_FOCUS = struct.pack("<BxH", 43, 1)  # a round trip: every request before it is done
#: Fonts tried in turn (XLFD names; "fixed" is built into the X server): (name, ISO 10646).
TITLE_FONTS = (
    ("-misc-fixed-bold-r-normal--18-120-100-100-c-90-iso10646-1", True),
    ("-misc-fixed-bold-r-normal--15-140-75-75-c-90-iso10646-1", True),
    ("9x15bold", False),
    ("fixed", False),
)
BODY_FONTS = (
    ("-misc-fixed-medium-r-normal--18-120-100-100-c-90-iso10646-1", True),
    ("-misc-fixed-medium-r-normal--15-140-75-75-c-90-iso10646-1", True),
    ("9x15", False),
    ("fixed", False),
)
COLUMNS = 64
MAX_LINES = 16
MARGIN = 16
HINT = "Click or press a key to close this message."
#: Colours (24-bit displays; others get the screen's black and white).
HEADER = 0x1F3A5F
PAPER = 0xFFFFF0
INK = 0x111111
WINDOW_CLASS = b"hostpool-message\0Hostpool\0"


@dataclass(frozen=True, slots=True)
class XServer:
    """A session's X server: its display, process, user (uid) and auth file argument; the
    session's root process (sesman's) and the user's home, for when the X server's own
    ``/proc`` entries cannot be followed (a container's root without CAP_SYS_PTRACE may not
    follow another user's; root's own, sesman's, it may)."""

    display: int
    pid: int
    uid: int
    auth: str | None
    leader: int = 0
    home: str | None = None

    def auth_paths(self) -> list[str]:
        """Where the auth file is, seen through the X server's file system (sesman starts
        the X server in the user's home: a relative name is there)."""
        if not self.auth:
            return []
        if self.auth.startswith("/"):
            paths = [f"/proc/{self.pid}/root{self.auth}"]
            if self.leader:
                paths.append(f"/proc/{self.leader}/root{self.auth}")
            return paths
        paths = [f"/proc/{self.pid}/cwd/{self.auth}"]
        if self.leader and self.home and self.home.startswith("/"):
            paths.append(f"/proc/{self.leader}/root{self.home.rstrip('/')}/{self.auth}")
        return paths

    def socket_paths(self) -> list[str]:
        """The display's socket: its abstract name (this network namespace), then its file."""
        name = f"/tmp/.X11-unix/X{self.display}"
        paths = [f"\0{name}", f"/proc/{self.pid}/root{name}"]
        if self.leader:
            paths.append(f"/proc/{self.leader}/root{name}")
        return paths


def read_cookie(server: XServer) -> bytes | None:
    """The server's cookie from its auth file, read as described above; None without one."""
    paths = server.auth_paths()
    if not paths:
        return None
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    problems = []
    for path in paths:
        try:
            handle = os.open(path, flags)
        except OSError as error:
            problems.append(f"{path}: {error.strerror}")
            continue
        try:
            return _cookie_from(handle, server)
        finally:
            os.close(handle)
    raise X11Error(f"cannot open the auth file of display :{server.display}: {'; '.join(problems)}")


def _cookie_from(handle: int, server: XServer) -> bytes | None:
    info = os.fstat(handle)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != server.uid:
        raise X11Error(
            f"the auth file of display :{server.display} is not a file of the session's user"
        )
    if info.st_size > MAX_AUTHORITY:
        raise X11Error(f"the auth file of display :{server.display} is too large")
    data = os.read(handle, MAX_AUTHORITY + 1)
    return cookie_for(parse_xauthority(data[:MAX_AUTHORITY]), server.display)


def peer_pid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _, _ = struct.unpack("3i", creds)
    return int(pid)


def connect_socket(server: XServer, timeout: float) -> socket.socket:
    """A connection to the server's display whose other end is the server itself."""
    paths = server.socket_paths()
    problems = []
    for path in paths:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            pid = peer_pid(sock)
            if pid == server.pid:
                return sock
            problems.append(f"{path.lstrip(chr(0))}: answered by process {pid}, not the X server")
        except OSError as error:
            problems.append(f"{path.lstrip(chr(0))}: {error}")
        sock.close()
    raise X11Error(f"cannot reach display :{server.display}: {'; '.join(problems)}")


class XConnection:
    """One client connection: requests out, replies matched by sequence, events queued."""

    def __init__(self, sock: socket.socket, setup: Setup) -> None:
        self.sock = sock
        self.setup = setup
        self.sequence = 0
        self.events: deque[bytes] = deque()
        self.serial = 0

    @classmethod
    def open(cls, server: XServer, timeout: float = X_TIMEOUT) -> XConnection:
        cookie = read_cookie(server)
        sock = connect_socket(server, timeout)
        try:
            sock.sendall(setup_request(cookie))
            head = read_exactly(sock, 8)
            length = setup_length(head)
            if length > 1 << 20:
                raise X11Error("the X server's set-up answer is too long")
            setup = parse_setup(head, read_exactly(sock, length))
        except BaseException:
            sock.close()
            raise
        return cls(sock, setup)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> XConnection:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def new_id(self) -> int:
        self.serial += 1
        return resource_id(self.setup, self.serial)

    def send(self, *requests: bytes) -> int:
        """Send requests; the sequence number of the last."""
        self.sock.sendall(b"".join(requests))
        self.sequence += len(requests)
        return self.sequence & 0xFFFF

    def reply(self, sequence: int) -> bytes:
        """The reply to request ``sequence`` (X11Error for its error)."""
        while True:
            data = self.read_packet()
            kind = data[0] & 0x7F
            if kind in (REPLY, ERROR):
                (number,) = struct.unpack_from("<H", data, 2)
                if number != sequence:
                    if kind == ERROR:
                        continue  # an earlier request's error: checked where it matters
                    raise X11Error("the X server answered out of order")
                if kind == ERROR:
                    raise X11Error(error_text(data))
                return data
            self.events.append(data)

    def call(self, request: bytes) -> bytes:
        return self.reply(self.send(request))

    def read_packet(self) -> bytes:
        head = read_exactly(self.sock, 32)
        return head + read_exactly(self.sock, answer_length(head))

    def next_event(self, timeout: float) -> bytes | None:
        """The next event, or None when none came within ``timeout`` seconds."""
        if self.events:
            return self.events.popleft()
        self.sock.settimeout(max(0.01, timeout))
        try:
            data = self.read_packet()
        except TimeoutError:
            return None
        finally:
            self.sock.settimeout(X_TIMEOUT)
        return None if data[0] & 0x7F in (REPLY, ERROR) else data

    def atom(self, name: str) -> int:
        return atom_of(self.call(intern_atom(name.encode())))


def read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    left = size
    while left:
        chunk = sock.recv(min(left, 65536))
        if not chunk:
            raise X11Error("the X server closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def idle_seconds(server: XServer) -> float:
    """Seconds since the last input (keyboard, pointer) on the server's display, as the
    server counts it (MIT-SCREEN-SAVER QueryInfo)."""
    try:
        with XConnection.open(server) as conn:
            opcode = extension_opcode(conn.call(query_extension(SCREEN_SAVER)))
            if opcode is None:
                raise X11Error(f"display :{server.display} has no MIT-SCREEN-SAVER extension")
            reply = conn.call(screen_saver_query_info(opcode, conn.setup.root))
    except OSError as error:
        raise X11Error(f"display :{server.display}: {error}") from error
    return idle_milliseconds(reply) / 1000.0


# ----------------------------------------------------------------- message windows


@dataclass(frozen=True, slots=True)
class Message:
    title: str
    text: str
    seconds: float  # how long the window stays at most


class MessageWindow:
    """A top-level window with a title bar (the window manager's), a heading and the text;
    it closes on a click or a key in it, the window manager's close, or after its time."""

    def __init__(self, conn: XConnection, message: Message) -> None:
        self.conn = conn
        self.message = message
        self.title_font, self.title_metrics = self.load_font(TITLE_FONTS)
        self.body_font, self.body_metrics = self.load_font(BODY_FONTS)
        self.lines = wrap(message.text, COLUMNS, MAX_LINES)
        self.window = conn.new_id()
        self.protocols = conn.atom("WM_PROTOCOLS")
        self.delete_window = conn.atom("WM_DELETE_WINDOW")
        self.geometry = self.layout()

    def load_font(self, candidates: tuple[tuple[str, bool], ...]) -> tuple[int, FontMetrics]:
        for name, two_byte in candidates:
            font = self.conn.new_id()
            self.conn.send(open_font(font, name.encode()))
            probe = char2b("MMMM", two_byte=two_byte)
            try:
                reply = self.conn.call(query_text_extents(font, probe))
            except X11Error:
                continue  # no such font here
            return font, font_metrics(reply, 4, two_byte=two_byte)
        raise X11Error("the X server has no usable font")

    def layout(self) -> Geometry:
        setup = self.conn.setup
        body, title = self.body_metrics, self.title_metrics
        columns = max([len(self.message.title), len(HINT), *(len(line) for line in self.lines)])
        width = min(setup.width - 20, columns * max(body.width, title.width) + 2 * MARGIN)
        height = title.height + 2 * MARGIN + (len(self.lines) + 1) * (body.height + 4) + 2 * MARGIN
        height = min(setup.height - 20, height)
        x = max(0, (setup.width - width) // 2)
        y = max(0, (setup.height - height) // 3)
        return Geometry(x, y, max(width, 100), max(height, 60))

    def colour(self, rgb: int, fallback: int) -> int:
        return rgb if self.conn.setup.depth >= 24 else fallback

    def create(self) -> None:
        conn, setup, window = self.conn, self.conn.setup, self.window
        title = self.message.title
        utf8 = conn.atom("UTF8_STRING")
        net_wm_name = conn.atom("_NET_WM_NAME")
        mask = EXPOSURE_MASK | KEY_PRESS_MASK | BUTTON_PRESS_MASK | STRUCTURE_NOTIFY_MASK
        paper = self.colour(PAPER, setup.white)
        conn.send(
            create_window(window, setup.root, self.geometry, paper, mask),
            change_property(window, WM_NAME, STRING, 8, title.encode("latin-1", "replace")),
            change_property(window, net_wm_name, utf8, 8, title.encode()),
            change_property(window, WM_CLASS, STRING, 8, WINDOW_CLASS),
            change_property(window, WM_NORMAL_HINTS, WM_SIZE_HINTS, 32, size_hints(self.geometry)),
            change_property(
                window, self.protocols, ATOM, 32, struct.pack("<I", self.delete_window)
            ),
            change_property(
                window, conn.atom("_NET_WM_PID"), CARDINAL, 32, struct.pack("<I", os.getpid())
            ),
        )
        self.header_gc, self.title_gc, self.body_gc = conn.new_id(), conn.new_id(), conn.new_id()
        header = self.colour(HEADER, setup.black)
        ink = self.colour(INK, setup.black)
        conn.send(
            create_gc(self.header_gc, window, header, header, self.title_font),
            create_gc(
                self.title_gc, window, self.colour(0xFFFFFF, setup.white), header, self.title_font
            ),
            create_gc(self.body_gc, window, ink, paper, self.body_font),
            map_window(window),
        )
        conn.call(GET_INPUT_FOCUS)  # every request above was taken (an error raises here)

    def draw(self) -> None:
        title, body = self.title_metrics, self.body_metrics
        band = title.height + 2 * MARGIN
        requests = [
            fill_rectangle(self.window, self.header_gc, Geometry(0, 0, self.geometry.width, band)),
            image_text16(
                self.window,
                self.title_gc,
                MARGIN,
                MARGIN + title.ascent,
                char2b(self.message.title, two_byte=title.two_byte),
            ),
        ]
        y = band + MARGIN + body.ascent
        for line in [*self.lines, "", HINT]:
            if line:
                text = char2b(line, two_byte=body.two_byte)
                requests.append(image_text16(self.window, self.body_gc, MARGIN, y, text))
            y += body.height + 4
        self.conn.send(*requests)

    def wait(self, stop: threading.Event) -> str:
        """Until the user closes it, its time is up or ``stop`` is set; why it closed."""
        deadline = time.monotonic() + self.message.seconds
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return "its time was up"
            event = self.conn.next_event(min(left, 1.0))
            if event is None:
                continue
            code = event[0] & 0x7F
            if code == EXPOSE and expose_count(event) == 0:
                self.draw()
            elif code in (KEY_PRESS, BUTTON_PRESS):
                return "the user closed it"
            elif code == DESTROY_NOTIFY or is_close_request(
                event, self.protocols, self.delete_window
            ):
                return "the window manager closed it"
        return "the agent stopped"


@dataclass
class Windows:
    """The message windows on show, each served by a thread of its own."""

    stop: threading.Event

    def show(self, server: XServer, message: Message) -> concurrent.futures.Future[None]:
        """Open the window in a thread; the future is done once the window is mapped (or
        failed, with the reason)."""
        shown: concurrent.futures.Future[None] = concurrent.futures.Future()
        thread = threading.Thread(
            target=self._serve,
            args=(server, message, shown),
            name=f"message-:{server.display}",
            daemon=True,
        )
        thread.start()
        return shown

    def _serve(
        self, server: XServer, message: Message, shown: concurrent.futures.Future[None]
    ) -> None:
        """The window's life: open, show (the future says so), wait, close. Whatever the X
        server answers, the thread ends and the future is done."""
        try:
            with XConnection.open(server) as conn:
                window = MessageWindow(conn, message)
                window.create()
                shown.set_result(None)
                why = window.wait(self.stop)
                log.debug("the message window on :%d closed: %s", server.display, why)
        except (X11Error, OSError, ValueError, IndexError, struct.error) as error:
            if not shown.done():
                shown.set_exception(X11Error(f"display :{server.display}: {error}"))
            else:
                log.debug("the message window on :%d ended: %s", server.display, error)
