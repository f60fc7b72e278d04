// The canvas palette and fonts in one place, so every item draws with the same look.
#pragma once

#include <QColor>
#include <QFont>
#include <QHash>
#include <string>

namespace dw::studio::style {

inline QColor canvas() {
  return QColor(0x26, 0x28, 0x2d);
}
inline QColor gridMinor() {
  return QColor(0x2e, 0x31, 0x37);
}
inline QColor gridMajor() {
  return QColor(0x36, 0x3a, 0x41);
}
inline QColor nodeBody() {
  return QColor(0x3b, 0x3f, 0x47);
}
inline QColor nodeBorder() {
  return QColor(0x16, 0x18, 0x1b);
}
inline QColor selection() {
  return QColor(0x4d, 0xa3, 0xff);
}
inline QColor error() {
  return QColor(0xf0, 0x4a, 0x4f);
}
inline QColor errorHeader() {
  return QColor(0xa3, 0x2b, 0x30);
}
inline QColor titleText() {
  return QColor(0xff, 0xff, 0xff);
}
inline QColor nameText() {
  return QColor(0xe8, 0xea, 0xee);
}
inline QColor dimText() {
  return QColor(0xb4, 0xb9, 0xc2);
}
inline QColor portText() {
  return QColor(0xdd, 0xe1, 0xe7);
}
inline QColor portColor() {
  return QColor(0x9f, 0xd3, 0x6a);
}
inline QColor graphPort() {
  return QColor(0xf2, 0xb8, 0x3a);
}
inline QColor linkColor() {
  return QColor(0xa9, 0xb1, 0xbd);
}
inline QColor labelBackground() {
  return QColor(0x18, 0x1a, 0x1e, 220);
}
inline QColor labelText() {
  return QColor(0xcf, 0xe6, 0xff);
}

inline QFont titleFont() {
  QFont f;
  f.setPointSizeF(11);
  f.setBold(true);
  return f;
}
inline QFont bodyFont() {
  QFont f;
  f.setPointSizeF(9.5);
  return f;
}
inline QFont portFont() {
  QFont f;
  f.setPointSizeF(9);
  return f;
}
inline QFont graphPortFont() {
  QFont f;
  f.setPointSizeF(7.5);
  return f;
}
inline QFont linkFont() {
  QFont f;
  f.setPointSizeF(8.5);
  return f;
}

// Header colour by category, so the kinds of node read at a glance. Red means a problem
// (errorHeader()), so no category is red: the training nodes (Accelerator, the steps) were once
// a brick red that made a valid Accelerator look broken.
inline QColor categoryColor(const std::string& category, const std::string& domain) {
  static const QHash<QString, QColor> kKnown = {
      {"graph", QColor(0x2f, 0x7d, 0x74)},         {"nn", QColor(0x3a, 0x5f, 0xa8)},
      {"math", QColor(0x8a, 0x5a, 0x2b)},          {"tensor", QColor(0x5b, 0x6b, 0x2f)},
      {"reduction", QColor(0x7a, 0x3e, 0x6e)},     {"logical", QColor(0x55, 0x55, 0x7a)},
      {"controlflow", QColor(0x5e, 0x4a, 0x78)},   {"generator", QColor(0x3f, 0x6f, 0x4f)},
      {"rnn", QColor(0x4b, 0x4f, 0x9a)},           {"object_detection", QColor(0x6f, 0x5a, 0x38)},
      {"quantization", QColor(0x4f, 0x5f, 0x66)},  {"sequence", QColor(0x66, 0x52, 0x7a)},
      {"traditionalml", QColor(0x55, 0x60, 0x4a)}, {"training", QColor(0x2e, 0x6a, 0x8c)},
  };
  const QString c = QString::fromStdString(category).toLower();
  if (auto it = kKnown.find(c); it != kKnown.end()) return *it;
  if (domain.rfind("deepwire.", 0) == 0) return QColor(0x6a, 0x48, 0x9e);
  // Other categories hash to a hue, kept clear of the reds (hue 330..30) that mean an error.
  const uint h = qHash(c);
  return QColor::fromHsl(int(40 + h % 280), 70, 80);
}

}  // namespace dw::studio::style
