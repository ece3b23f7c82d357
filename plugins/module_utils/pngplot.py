# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A small line chart written as PNG with the standard library only.

The fleet report of the benchmark role plots output tokens per second
against concurrency, one line per host. Pulling matplotlib into every
control node for one chart is not worth it: this draws axes, a grid, tick
labels, lines with markers and a legend on an RGB canvas with a built-in
5x7 pixel font, and encodes it as a PNG (zlib + CRC from the standard
library). The same input always gives the same bytes.

Public API:

* ``render_line_chart(series, title='', x_label='', y_label='',
  width=960, height=540, log_x=True) -> bytes`` where ``series`` is a list
  of ``{'name': str, 'points': [(x, y), ...]}`` (points with a None or
  non-positive x on a log axis are skipped)
* ``encode_png(width, height, rgb) -> bytes`` (rgb: bytes of width*height*3)
* ``PALETTE``: the series colours, in order
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math
import struct
import zlib

PALETTE = (
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
)
WHITE = (255, 255, 255)
BLACK = (0, 0, 0)
GRID = (225, 225, 225)
AXIS = (60, 60, 60)

# 5x7 glyphs (baseline under row 7; g j p q y and the comma descend two rows
# more), rows top to bottom, '1' = ink.
_GLYPHS = {
    '0': '01110 10001 10011 10101 11001 10001 01110', '1': '00100 01100 00100 00100 00100 00100 01110',
    '2': '01110 10001 00001 00010 00100 01000 11111', '3': '11111 00010 00100 00010 00001 10001 01110',
    '4': '00010 00110 01010 10010 11111 00010 00010', '5': '11111 10000 11110 00001 00001 10001 01110',
    '6': '00110 01000 10000 11110 10001 10001 01110', '7': '11111 00001 00010 00100 01000 01000 01000',
    '8': '01110 10001 10001 01110 10001 10001 01110', '9': '01110 10001 10001 01111 00001 00010 01100',
    'A': '01110 10001 10001 11111 10001 10001 10001', 'B': '11110 10001 10001 11110 10001 10001 11110',
    'C': '01110 10001 10000 10000 10000 10001 01110', 'D': '11100 10010 10001 10001 10001 10010 11100',
    'E': '11111 10000 10000 11110 10000 10000 11111', 'F': '11111 10000 10000 11110 10000 10000 10000',
    'G': '01110 10001 10000 10111 10001 10001 01111', 'H': '10001 10001 10001 11111 10001 10001 10001',
    'I': '01110 00100 00100 00100 00100 00100 01110', 'J': '00111 00010 00010 00010 00010 10010 01100',
    'K': '10001 10010 10100 11000 10100 10010 10001', 'L': '10000 10000 10000 10000 10000 10000 11111',
    'M': '10001 11011 10101 10101 10001 10001 10001', 'N': '10001 10001 11001 10101 10011 10001 10001',
    'O': '01110 10001 10001 10001 10001 10001 01110', 'P': '11110 10001 10001 11110 10000 10000 10000',
    'Q': '01110 10001 10001 10001 10101 10010 01101', 'R': '11110 10001 10001 11110 10100 10010 10001',
    'S': '01111 10000 10000 01110 00001 00001 11110', 'T': '11111 00100 00100 00100 00100 00100 00100',
    'U': '10001 10001 10001 10001 10001 10001 01110', 'V': '10001 10001 10001 10001 10001 01010 00100',
    'W': '10001 10001 10001 10101 10101 10101 01010', 'X': '10001 10001 01010 00100 01010 10001 10001',
    'Y': '10001 10001 10001 01010 00100 00100 00100', 'Z': '11111 00001 00010 00100 01000 10000 11111',
    'a': '00000 00000 01110 00001 01111 10001 01111', 'b': '10000 10000 10110 11001 10001 10001 11110',
    'c': '00000 00000 01110 10000 10000 10001 01110', 'd': '00001 00001 01101 10011 10001 10001 01111',
    'e': '00000 00000 01110 10001 11111 10000 01110', 'f': '00110 01001 01000 11100 01000 01000 01000',
    'g': '00000 00000 01111 10001 10001 10001 01111 00001 01110', 'h': '10000 10000 10110 11001 10001 10001 10001',
    'i': '00100 00000 01100 00100 00100 00100 01110', 'j': '00010 00000 00110 00010 00010 00010 00010 10010 01100',
    'k': '10000 10000 10010 10100 11000 10100 10010', 'l': '01100 00100 00100 00100 00100 00100 01110',
    'm': '00000 00000 11010 10101 10101 10001 10001', 'n': '00000 00000 10110 11001 10001 10001 10001',
    'o': '00000 00000 01110 10001 10001 10001 01110', 'p': '00000 00000 11110 10001 10001 10001 11110 10000 10000',
    'q': '00000 00000 01111 10001 10001 10001 01111 00001 00001', 'r': '00000 00000 10110 11001 10000 10000 10000',
    's': '00000 00000 01110 10000 01110 00001 11110', 't': '01000 01000 11100 01000 01000 01001 00110',
    'u': '00000 00000 10001 10001 10001 10011 01101', 'v': '00000 00000 10001 10001 10001 01010 00100',
    'w': '00000 00000 10001 10001 10101 10101 01010', 'x': '00000 00000 10001 01010 00100 01010 10001',
    'y': '00000 00000 10001 10001 10001 10001 01111 00001 01110', 'z': '00000 00000 11111 00010 00100 01000 11111',
    ' ': '00000 00000 00000 00000 00000 00000 00000', '-': '00000 00000 00000 11111 00000 00000 00000',
    '_': '00000 00000 00000 00000 00000 00000 11111', '.': '00000 00000 00000 00000 00000 01100 01100',
    ',': '00000 00000 00000 00000 00000 01100 00100 01000', ':': '00000 01100 01100 00000 01100 01100 00000',
    '/': '00000 00001 00010 00100 01000 10000 00000', '(': '00010 00100 01000 01000 01000 00100 00010',
    ')': '01000 00100 00010 00010 00010 00100 01000', '%': '11000 11001 00010 00100 01000 10011 00011',
    '=': '00000 00000 11111 00000 11111 00000 00000', '+': '00000 00100 00100 11111 00100 00100 00000',
    '[': '01110 01000 01000 01000 01000 01000 01110', ']': '01110 00010 00010 00010 00010 00010 01110',
    '<': '00010 00100 01000 10000 01000 00100 00010', '>': '01000 00100 00010 00001 00010 00100 01000',
    '#': '01010 01010 11111 01010 11111 01010 01010', '@': '01110 10001 00001 01101 10101 10101 01110',
    "'": '00100 00100 01000 00000 00000 00000 00000', '?': '01110 10001 00001 00010 00100 00000 00100',
    '!': '00100 00100 00100 00100 00100 00000 00100', '*': '00000 00100 10101 01110 10101 00100 00000',
}
_FONT = dict((char, rows.split()) for char, rows in _GLYPHS.items())
GLYPH_W, GLYPH_H = 5, 7  # the cell is 9 rows high with the descenders


class Canvas:
    """An RGB raster with the few drawing operations the chart needs."""

    def __init__(self, width, height, background=WHITE):
        self.width = width
        self.height = height
        self.pixels = bytearray(bytes(background) * (width * height))

    def set(self, x, y, color):
        if 0 <= x < self.width and 0 <= y < self.height:
            offset = (y * self.width + x) * 3
            self.pixels[offset:offset + 3] = bytes(color)

    def get(self, x, y):
        offset = (y * self.width + x) * 3
        return tuple(self.pixels[offset:offset + 3])

    def rect(self, x0, y0, x1, y1, color):
        """Fill the rectangle with corners (x0, y0) and (x1, y1), inclusive."""
        x0, x1 = max(0, min(x0, x1)), min(self.width - 1, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.height - 1, max(y0, y1))
        if x0 > x1 or y0 > y1:
            return
        run = bytes(color) * (x1 - x0 + 1)
        for y in range(y0, y1 + 1):
            offset = (y * self.width + x0) * 3
            self.pixels[offset:offset + len(run)] = run

    def line(self, x0, y0, x1, y1, color, thickness=1):
        """Bresenham's line, thickened with a square pen."""
        x0, y0, x1, y1 = int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1))
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx = 1 if x0 < x1 else -1
        sy = 1 if y0 < y1 else -1
        err = dx + dy
        low = -(thickness // 2)
        high = low + thickness - 1
        while True:
            if thickness == 1:
                self.set(x0, y0, color)
            else:
                self.rect(x0 + low, y0 + low, x0 + high, y0 + high, color)
            if x0 == x1 and y0 == y1:
                break
            doubled = 2 * err
            if doubled >= dy:
                err += dy
                x0 += sx
            if doubled <= dx:
                err += dx
                y0 += sy

    def text(self, x, y, string, color=BLACK, scale=2):
        """Draw ``string`` with its top-left corner at (x, y); returns the width drawn."""
        cursor = x
        for char in str(string):
            rows = _FONT.get(char) or _FONT['?']
            for row_index, row in enumerate(rows):
                for col_index, bit in enumerate(row):
                    if bit == '1':
                        px = cursor + col_index * scale
                        py = y + row_index * scale
                        self.rect(px, py, px + scale - 1, py + scale - 1, color)
            cursor += (GLYPH_W + 1) * scale
        return cursor - x


def text_width(string, scale=2):
    return len(str(string)) * (GLYPH_W + 1) * scale - scale if string else 0


def encode_png(width, height, rgb):
    """PNG (8-bit RGB, no interlace) of ``rgb`` (width * height * 3 bytes)."""
    if len(rgb) != width * height * 3:
        raise ValueError('expected %d bytes of RGB, got %d' % (width * height * 3, len(rgb)))
    stride = width * 3
    raw = bytearray()
    for y in range(height):
        raw.append(0)  # filter type 0 (None) for every scanline
        raw.extend(rgb[y * stride:(y + 1) * stride])

    def chunk(kind, data):
        return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', header) + chunk(b'IDAT', zlib.compress(bytes(raw), 9))
            + chunk(b'IEND', b''))


def _nice_ceiling(value):
    """The smallest 1/2/2.5/5 x 10^k at or above value (value > 0)."""
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        candidate = step * 10 ** exponent
        if candidate >= value * 0.999999:
            return candidate
    return 10 ** (exponent + 1)


def _y_ticks(max_value, count=5):
    if max_value <= 0:
        return [0, 1], 1.0
    step = _nice_ceiling(max_value / count)
    top = step * math.ceil(max_value / step - 1e-9)
    if top <= 0:
        top = step
    ticks = []
    value = 0.0
    while value <= top + step / 2:
        ticks.append(value)
        value += step
    return ticks, top


def _tick_label(value):
    if value == int(value):
        return '{:,}'.format(int(value))
    return '{:,.1f}'.format(value)


def render_line_chart(series, title='', x_label='', y_label='', width=960, height=540, log_x=True):
    """PNG bytes of a line chart; ``series``: [{'name': str, 'points': [(x, y), ...]}, ...]."""
    clean = []
    for item in series or []:
        points = []
        for point in item.get('points') or []:
            try:
                x, y = float(point[0]), float(point[1])
            except (TypeError, ValueError, IndexError):
                continue
            if math.isnan(x) or math.isnan(y) or math.isinf(x) or math.isinf(y) or (log_x and x <= 0):
                continue
            points.append((x, y))
        points.sort()
        clean.append((str(item.get('name', '')), points))

    canvas = Canvas(width, height)
    legend_w = 0
    for name, dummy in clean:
        legend_w = max(legend_w, text_width(name[:24]) + 36)
    left, right, top, bottom = 96, width - max(legend_w + 24, 40), 76, height - 72
    if right - left < 100:
        right = width - 40

    xs = sorted(set(point[0] for dummy, points in clean for point in points))
    ys = [y for dummy, points in clean for dummy_x, y in points]
    y_ticks, y_top = _y_ticks(max(ys) if ys else 0)

    def tx(x):
        if not xs:
            return (left + right) / 2.0
        lo, hi = xs[0], xs[-1]
        if log_x:
            lo, hi, x = math.log(lo), math.log(hi), math.log(x)
        if hi == lo:
            return (left + right) / 2.0
        pad = (right - left) * 0.05
        return left + pad + (x - lo) / (hi - lo) * (right - left - 2 * pad)

    def ty(y):
        return bottom - (y / y_top) * (bottom - top) if y_top else bottom

    # grid and ticks
    for value in y_ticks:
        y = int(round(ty(value)))
        canvas.line(left, y, right, y, GRID)
        label = _tick_label(value)
        canvas.text(left - 10 - text_width(label), y - GLYPH_H, label, AXIS)
    for value in xs:
        x = int(round(tx(value)))
        canvas.line(x, top, x, bottom, GRID)
        label = _tick_label(value)
        canvas.text(x - text_width(label) // 2, bottom + 10, label, AXIS)
    canvas.line(left, top, left, bottom, AXIS, 2)
    canvas.line(left, bottom, right, bottom, AXIS, 2)

    # labels
    if title:
        canvas.text(left, 18, title[:(width - left) // 12], BLACK)
    if y_label:
        canvas.text(max(4, left - 10 - text_width(y_label)), top - 24, y_label, AXIS)
    if x_label:
        canvas.text((left + right) // 2 - text_width(x_label) // 2, bottom + 38, x_label, AXIS)

    # series
    for index, (name, points) in enumerate(clean):
        color = PALETTE[index % len(PALETTE)]
        pixels = [(tx(x), ty(y)) for x, y in points]
        for (x0, y0), (x1, y1) in zip(pixels, pixels[1:]):
            canvas.line(x0, y0, x1, y1, color, 3)
        for x, y in pixels:
            cx, cy = int(round(x)), int(round(y))
            canvas.rect(cx - 4, cy - 4, cx + 4, cy + 4, color)
        legend_y = top + 8 + index * 24
        canvas.rect(right + 24, legend_y, right + 40, legend_y + 13, color)
        canvas.text(right + 48, legend_y, name[:24], BLACK)

    return encode_png(width, height, canvas.pixels)
