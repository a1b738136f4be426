"""Django's SMTP email backend with a total deadline on each conversation.

EMAIL_TIMEOUT bounds one socket operation; a mail server that answers one
byte at a time never trips it, and would hold an io thread (and the
delivery's claim) for as long as it likes. Here every `send_messages`, from
connecting to QUIT, runs inside `deadline(NOTIFY_EMAIL_DEADLINE_S)` on
sockets that obey it (notify/deadline.py), with or without TLS. settings.py
puts this backend in place of Django's SMTP one.
"""
from __future__ import annotations

import smtplib
import ssl

from django.conf import settings
from django.core.mail.backends import smtp
from django.utils.functional import cached_property

from notify import deadline


class _SMTP(smtplib.SMTP):
    def _get_socket(self, host, port, timeout):
        return deadline.bounded(super()._get_socket(host, port, timeout))


class _SMTPSSL(_SMTP, smtplib.SMTP_SSL):
    """SMTP_SSL wraps the plain socket with `self.context`: ours makes bounded SSL sockets."""


class EmailBackend(smtp.EmailBackend):
    @property
    def connection_class(self):
        return _SMTPSSL if self.use_ssl else _SMTP

    @cached_property
    def ssl_context(self) -> ssl.SSLContext:
        # STARTTLS and SMTPS wrap with this context: bounded SSL sockets.
        return deadline.ssl_context(super().ssl_context)

    def send_messages(self, email_messages) -> int:
        with deadline.deadline(settings.NOTIFY_EMAIL_DEADLINE_S):
            return super().send_messages(email_messages)

    def _close_connection(self, connection) -> None:
        try:
            super()._close_connection(connection)
        except OSError:  # QUIT after the deadline (or a dead server): just close the socket
            connection.close()
